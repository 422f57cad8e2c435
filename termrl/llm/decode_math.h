/* Arithmetic shared by the decode kernels (decode_attention.c, decode_ops.c, decode_matmul.c). */
#ifndef TERMRL_DECODE_MATH_H
#define TERMRL_DECODE_MATH_H

#include <stdint.h>

/* A bfloat16 is a float32's top half: widening is exact. */
static inline float bf16_to_float(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
}

/* Rounded to nearest even, as torch's .to(torch.bfloat16) rounds. */
static inline uint16_t float_to_bf16(float f) {
    uint32_t i;
    __builtin_memcpy(&i, &f, sizeof i);
    if (f != f) return 0x7fc0; /* a quiet NaN */
    return (uint16_t)((i + 0x7fffu + ((i >> 16) & 1u)) >> 16);
}

/* 16 floats at any address, and the 16-lane integer vectors that widen bfloat16 into them. */
typedef float f32x16 __attribute__((vector_size(64), aligned(4)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));

static inline f32x16 load_f32x16(const float *a) {
    f32x16 v;
    __builtin_memcpy(&v, a, sizeof v);
    return v;
}

/* 16 bfloat16 values widened to float32. */
static inline f32x16 load_bf16x16(const uint16_t *a) {
    u16x16 h;
    __builtin_memcpy(&h, a, sizeof h);
    const u32x16 w = __builtin_convertvector(h, u32x16) << 16;
    f32x16 v;
    __builtin_memcpy(&v, &w, sizeof v);
    return v;
}

/* n values of a (float32, or bfloat16 where bf16) into float32 dst. */
static inline void load_row(const void *a, int bf16, int64_t n, float *dst) {
    if (bf16) {
        const uint16_t *h = a;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_float(h[i]);
    } else {
        __builtin_memcpy(dst, a, sizeof(float) * n);
    }
}

/* n float32 values of src into a (float32, or bfloat16 rounded to nearest even where bf16). */
static inline void store_row(const float *src, int64_t n, void *a, int bf16) {
    if (bf16) {
        uint16_t *h = a;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) h[i] = float_to_bf16(src[i]);
    } else {
        __builtin_memcpy(a, src, sizeof(float) * n);
    }
}

/* exp(x) for x <= 0, to ~1 ulp: Cody-Waite reduction by ln 2 and Cephes' polynomial.
 * Plain arithmetic, so the compiler vectorizes it (libm's expf is a call per value). */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x; /* 2^-126 is the smallest normal float */
    /* n = x / ln 2 rounded to nearest by adding and taking away 1.5 * 2^23 (|x / ln 2| < 2^22;
     * IEEE arithmetic, so no -ffast-math). floorf here kept gcc from vectorizing the loops that
     * call this: the softmax and SiLU ran a value at a time, 6x slower. */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float f = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    p = p * f * f + f + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23; /* 2^n */
    float scale;
    __builtin_memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif
