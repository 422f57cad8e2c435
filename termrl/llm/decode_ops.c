/* A decode layer's small ops on a CPU, so that a layer is its four matmuls and three calls here
 * instead of ~45 torch ops of a few microseconds each, 30 layers a step. Built with
 * decode_attention.c into one library and loaded by decode_kernels.py; decode_step.py's torch
 * step (_decode) is what each op reproduces, to float rounding.
 *
 * Activations come in and go out in the matmuls' type, float32 or bfloat16 (a flag per
 * tensor); the arithmetic is float32, and a bfloat16 result is rounded to nearest even, as
 * torch's .to(torch.bfloat16) rounds. The residual stream x stays float32.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "decode_math.h"

int decode_attention(const float *q, const void *keys, const void *values, int kv_bf16,
                     int64_t row_stride, int64_t head_stride, int64_t capacity,
                     const int64_t *lengths, int B, int H, int H_kv, int D, float scale,
                     float *out); /* decode_attention.c */

static inline int64_t item_size(int bf16) { return bf16 ? 2 : 4; }

/* x [B, E] float32 += delta [B, E] (skipped where delta is NULL), in place; then
 * out [B, E] = w * (x / sqrt(mean(x^2) + eps)): the residual add that ends one block and the
 * RMS norm that starts the next. Returns 0, or -1 where out of memory. */
int add_rms_norm(float *x, const void *delta, int delta_bf16, const float *w, float eps, int B,
                 int E, void *out, int out_bf16) {
    float *d = malloc(sizeof(float) * E), *h = malloc(sizeof(float) * E);
    int status = d && h ? 0 : -1;
    for (int b = 0; b < B && status == 0; b++) {
        float *xb = x + (int64_t)b * E;
        if (delta) {
            load_row((const char *)delta + (int64_t)b * E * item_size(delta_bf16), delta_bf16, E,
                     d);
#pragma omp simd
            for (int e = 0; e < E; e++) xb[e] += d[e];
        }
        float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
        for (int e = 0; e < E; e++) squares += xb[e] * xb[e];
        const float r = 1.0f / sqrtf(squares / (float)E + eps);
#pragma omp simd
        for (int e = 0; e < E; e++) h[e] = w[e] * (xb[e] * r);
        store_row(h, E, (char *)out + (int64_t)b * E * item_size(out_bf16), out_bf16);
    }
    free(d);
    free(h);
    return status;
}

/* gate_up [B, 2I] (a row's gate, then its up) -> out [B, I] = silu(gate) * up. Returns 0, or
 * -1 where out of memory. */
int silu_mul(const void *gate_up, int in_bf16, int B, int I, void *out, int out_bf16) {
    float *g = malloc(sizeof(float) * 2 * I), *h = malloc(sizeof(float) * I);
    int status = g && h ? 0 : -1;
    for (int b = 0; b < B && status == 0; b++) {
        load_row((const char *)gate_up + (int64_t)b * 2 * I * item_size(in_bf16), in_bf16, 2 * I,
                 g);
#pragma omp simd
        for (int i = 0; i < I; i++) {
            /* silu(x) = x / (1 + e^-x), through e^-|x| so that exp never overflows */
            const float x = g[i], e = exp_nonpositive(-fabsf(x));
            const float sigmoid = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
            h[i] = x * sigmoid * g[I + i];
        }
        store_row(h, I, (char *)out + (int64_t)b * I * item_size(out_bf16), out_bf16);
    }
    free(g);
    free(h);
    return status;
}

/* x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[D/2:], x[:D/2]): Llama's RoPE. */
static void rope(const float *x, const float *cos, const float *sin, int D, float *out) {
    const int half = D / 2;
#pragma omp simd
    for (int d = 0; d < half; d++) out[d] = x[d] * cos[d] + -x[d + half] * sin[d];
#pragma omp simd
    for (int d = half; d < D; d++) out[d] = x[d] * cos[d] + x[d - half] * sin[d];
}

/* A layer's attention from its q/k/v matmul: qkv [B, (H + 2 H_kv) D] holds a row's H query
 * heads, then its H_kv key heads, then its value heads. Each row's query and key are rotated
 * by RoPE at the row's position (cos, sin: [T, D] tables by position), its key and value are
 * written to the cache at that column (keys, values [B, H_kv, capacity, D] by strides, as
 * decode_attention reads them; float32, or bfloat16 rounded to nearest even where kv_bf16),
 * and the row attends columns [0, position]. out [B, H D].
 * Returns 0, or -1 on a position past the cache or shapes the attention does not take. */
int rope_attend(const void *qkv, int qkv_bf16, const float *cos_table, const float *sin_table,
                const int64_t *positions, void *keys, void *values, int kv_bf16,
                int64_t row_stride, int64_t head_stride, int64_t capacity, int B, int H, int H_kv,
                int D, float scale, void *out, int out_bf16) {
    if (B <= 0 || D <= 0 || D % 2 || H <= 0 || H_kv <= 0) return -1;
    for (int b = 0; b < B; b++)
        if (positions[b] < 0 || positions[b] >= capacity) return -1;
    const int64_t width = (int64_t)(H + 2 * H_kv) * D, q_size = (int64_t)B * H * D;
    const int64_t size = item_size(kv_bf16);
    float *row = malloc(sizeof(float) * width), *key = malloc(sizeof(float) * D);
    float *q = malloc(sizeof(float) * q_size);
    float *attn = malloc(sizeof(float) * q_size);
    int64_t *lengths = malloc(sizeof(int64_t) * B);
    int status = -1;
    if (!row || !key || !q || !attn || !lengths) goto done;
    for (int b = 0; b < B; b++) {
        const int64_t at = positions[b];
        const float *cos = cos_table + at * D, *sin = sin_table + at * D;
        load_row((const char *)qkv + b * width * item_size(qkv_bf16), qkv_bf16, width, row);
        for (int h = 0; h < H; h++) rope(row + h * D, cos, sin, D, q + ((int64_t)b * H + h) * D);
        for (int h = 0; h < H_kv; h++) {
            const int64_t column = (b * row_stride + h * head_stride + at * D) * size;
            rope(row + (int64_t)(H + h) * D, cos, sin, D, key);
            store_row(key, D, (char *)keys + column, kv_bf16);
            store_row(row + (int64_t)(H + H_kv + h) * D, D, (char *)values + column, kv_bf16);
        }
        lengths[b] = at + 1;
    }
    status = decode_attention(q, keys, values, kv_bf16, row_stride, head_stride, capacity,
                              lengths, B, H, H_kv, D, scale, attn);
    if (status == 0) store_row(attn, q_size, out, out_bf16);
done:
    free(row);
    free(key);
    free(q);
    free(attn);
    free(lengths);
    return status;
}
