/* Arithmetic shared by the decode kernels (decode_attention.c, decode_ops.c). */
#ifndef TERMRL_DECODE_MATH_H
#define TERMRL_DECODE_MATH_H

#include <stdint.h>

/* exp(x) for x <= 0, to ~1 ulp: Cody-Waite reduction by ln 2 and Cephes' polynomial.
 * Plain arithmetic, so the compiler vectorizes it (libm's expf is a call per value). */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x; /* 2^-126 is the smallest normal float */
    float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    float f = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    p = p * f * f + f + 1.0f;
    union { int32_t i; float f; } scale = {.i = ((int32_t)n + 127) << 23};
    return p * scale.f;
}

#endif
