/* Decode attention on a CPU: one query token per row, each row over its own columns of a
 * static KV cache, read once at memory speed. Built and loaded by decode_kernels.py.
 *
 * The work is split into blocks of BLOCK columns of one (row, KV head): a row's length does
 * not decide how busy a thread is (flash-decoding). A block reads its keys once for the G
 * query heads that share them (grouped-query attention), then its values once, and leaves a
 * partial softmax (max, sum, weighted values); a second pass merges a head's blocks.
 *
 * The cache holds float32 or bfloat16 (kv_bf16), so the cache's bytes, which are most of what
 * a long step reads, can halve. A bfloat16 column is multiplied by AVX512-BF16's pairwise dot
 * products where the compiler targets them (attend_paired below: the query and the softmax
 * weights rounded to bfloat16, as the bf16 matmuls round their inputs), else widened to
 * float32 as it is loaded; either way every sum is float32.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decode_math.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#define PAIRED 1 /* a bfloat16 cache is multiplied in pairs by vdpbf16ps, as the matmuls are */
#else
#define PAIRED 0
#endif

#define BLOCK 256
#define MAX_GROUP 16
#define MAX_DIM 256

typedef f32x16 vec16; /* 16 floats, any address (decode_math.h) */
typedef float vec8 __attribute__((vector_size(32)));
typedef float vec4 __attribute__((vector_size(16)));

/* The sums of four vectors' lanes, together: three quarters of the shuffles of four sum16. */
static inline vec4 sum16x4(vec16 t0, vec16 t1, vec16 t2, vec16 t3) {
    vec16 a01 = __builtin_shufflevector(t0, t1, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21,
                                        22, 23) +
                __builtin_shufflevector(t0, t1, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28,
                                        29, 30, 31);
    vec16 a23 = __builtin_shufflevector(t2, t3, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21,
                                        22, 23) +
                __builtin_shufflevector(t2, t3, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28,
                                        29, 30, 31);
    vec16 b = __builtin_shufflevector(a01, a23, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25,
                                      26, 27) +
              __builtin_shufflevector(a01, a23, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28,
                                      29, 30, 31);
    vec8 c = __builtin_shufflevector(b, b, 0, 1, 4, 5, 8, 9, 12, 13) +
             __builtin_shufflevector(b, b, 2, 3, 6, 7, 10, 11, 14, 15);
    return __builtin_shufflevector(c, c, 0, 2, 4, 6) + __builtin_shufflevector(c, c, 1, 3, 5, 7);
}

/* A value column's cache lines on their way to L2 while its key is scored, so that memory
 * streams keys and values at once (measured: +5 % on a bfloat16 cache; a float32 one, twice
 * the lines, lost as much). */
static inline void prefetch_column(const void *column, int bytes) {
    for (int at = 0; at < bytes; at += 64) __builtin_prefetch((const char *)column + at, 0, 2);
}

/* The sum of x's lanes by halving (a loop over the lanes is one long dependent chain). */
static inline float sum16(vec16 x) {
    vec8 a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
             __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
    vec4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* Columns j..j+3's scores for G heads: t[g][c] holds head g's products with column c in its
 * lanes, summed here and scaled. */
static inline void store_scores(vec16 t[][4], int G, int j, float scale,
                                float s[MAX_GROUP][BLOCK]) {
    for (int g = 0; g < G; g++) {
        const vec4 dots = sum16x4(t[g][0], t[g][1], t[g][2], t[g][3]) * scale;
        memcpy(&s[g][j], &dots, sizeof(dots));
    }
}

/* One block: columns [0, n) of keys/values (column stride D) for the G query heads in q;
 * s holds the block's scores, and leaves with their weights exp(s - max), rounded to bfloat16
 * where rounded (the weights the values are then multiplied by, so that the sum is theirs).
 * part: per head [max, sum, D weighted values]. */
static void softmax_rows(float s[MAX_GROUP][BLOCK], int n, int G, int D, int rounded,
                         float *part) {
    for (int g = 0; g < G; g++) {
        float m = s[g][0], sum = 0.0f;
#pragma omp simd reduction(max : m)
        for (int j = 1; j < n; j++) m = s[g][j] > m ? s[g][j] : m;
        if (rounded) {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < n; j++) {
                s[g][j] = bf16_to_float(float_to_bf16(exp_nonpositive(s[g][j] - m)));
                sum += s[g][j];
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < n; j++) {
                s[g][j] = exp_nonpositive(s[g][j] - m);
                sum += s[g][j];
            }
        }
        part[g * (D + 2)] = m;
        part[g * (D + 2) + 1] = sum;
    }
}

/* D = 64 (SmolLM2 and most small Llamas), NG query heads at a time (a compile-time count), the
 * cache in type T read by LOAD: a column is four 16-float vectors, read once for all NG heads,
 * and the heads' accumulators stay in registers. */
#define ATTEND_BLOCK_64(NG, NAME, T, LOAD)                                                       \
    static void NAME##_##NG(const float *q, const T *k, const T *v, int n, float scale,          \
                            float *part) {                                                       \
        float s[MAX_GROUP][BLOCK];                                                               \
        const vec16 *qv = (const vec16 *)q;                                                      \
        int j = 0;                                                                               \
        for (; j + 4 <= n; j += 4) {                                                             \
            vec16 t[NG][4];                                                                      \
            for (int c = 0; c < 4; c++) {                                                        \
                const T *kj = k + (int64_t)(j + c) * 64;                                         \
                const vec16 k0 = LOAD(kj), k1 = LOAD(kj + 16), k2 = LOAD(kj + 32),               \
                            k3 = LOAD(kj + 48);                                                  \
                for (int g = 0; g < NG; g++)                                                     \
                    t[g][c] = qv[4 * g] * k0 + qv[4 * g + 1] * k1 + qv[4 * g + 2] * k2 +         \
                              qv[4 * g + 3] * k3;                                                \
            }                                                                                    \
            store_scores(t, NG, j, scale, s);                                                    \
        }                                                                                        \
        for (; j < n; j++) {                                                                     \
            const T *kj = k + (int64_t)j * 64;                                                   \
            const vec16 k0 = LOAD(kj), k1 = LOAD(kj + 16), k2 = LOAD(kj + 32),                   \
                        k3 = LOAD(kj + 48);                                                      \
            for (int g = 0; g < NG; g++)                                                         \
                s[g][j] = sum16(qv[4 * g] * k0 + qv[4 * g + 1] * k1 + qv[4 * g + 2] * k2 +      \
                                qv[4 * g + 3] * k3) *                                            \
                          scale;                                                                 \
        }                                                                                        \
        softmax_rows(s, n, NG, 64, 0, part);                                                     \
        vec16 acc[NG][4] = {0};                                                                  \
        for (int j = 0; j < n; j++) {                                                            \
            const T *vj = v + (int64_t)j * 64;                                                   \
            const vec16 v0 = LOAD(vj), v1 = LOAD(vj + 16), v2 = LOAD(vj + 32),                   \
                        v3 = LOAD(vj + 48);                                                      \
            for (int g = 0; g < NG; g++) {                                                       \
                const float p = s[g][j];                                                         \
                acc[g][0] += p * v0;                                                             \
                acc[g][1] += p * v1;                                                             \
                acc[g][2] += p * v2;                                                             \
                acc[g][3] += p * v3;                                                             \
            }                                                                                    \
        }                                                                                        \
        for (int g = 0; g < NG; g++) memcpy(part + g * 66 + 2, acc[g], sizeof(acc[g]));         \
    }

ATTEND_BLOCK_64(1, attend_f32, float, load_f32x16)
ATTEND_BLOCK_64(2, attend_f32, float, load_f32x16)
ATTEND_BLOCK_64(3, attend_f32, float, load_f32x16)
ATTEND_BLOCK_64(4, attend_f32, float, load_f32x16)
ATTEND_BLOCK_64(1, attend_bf16, uint16_t, load_bf16x16)
ATTEND_BLOCK_64(2, attend_bf16, uint16_t, load_bf16x16)
ATTEND_BLOCK_64(3, attend_bf16, uint16_t, load_bf16x16)
ATTEND_BLOCK_64(4, attend_bf16, uint16_t, load_bf16x16)

#if PAIRED
/* D = 64 on a bfloat16 cache with AVX512-BF16: the cache's values are multiplied as they are,
 * in pairs by vdpbf16ps, instead of widened to float32 one by one (which took most of a
 * block's time). So the query and the softmax weights are rounded to bfloat16, as the matmuls
 * round their inputs; every sum stays float32.
 *
 * Scores: a key column is two vectors of 32 values, each dotted pairwise with the query's.
 * Values: columns j and j + 1 are interleaved (unpacklo/hi_epi16) so that each 32-bit lane
 * holds one dimension of both, and the lane's dot with the pair (p_j, p_j+1) adds both
 * columns' share. The interleave orders dimensions by 128-bit lane (dims 8L..8L+3 in the
 * "lo" vector, 8L+4..8L+7 in the "hi" one); the accumulators are put back in order at the end. */
#define ATTEND_PAIRED_64(NG)                                                                     \
    static void attend_paired_##NG(const float *q, const uint16_t *k, const uint16_t *v, int n, \
                                   float scale, float *part) {                                   \
        float s[MAX_GROUP][BLOCK];                                                               \
        __m512bh qb[NG][2];                                                                      \
        for (int g = 0; g < NG; g++)                                                             \
            for (int h = 0; h < 2; h++)                                                          \
                qb[g][h] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + 64 * g + 32 * h + 16),       \
                                               _mm512_loadu_ps(q + 64 * g + 32 * h));           \
        int j = 0;                                                                               \
        for (; j + 4 <= n; j += 4) {                                                             \
            vec16 t[NG][4];                                                                      \
            for (int c = 0; c < 4; c++) {                                                        \
                const uint16_t *kj = k + (int64_t)(j + c) * 64;                                  \
                prefetch_column(v + (int64_t)(j + c) * 64, 128);                                 \
                const __m512bh k0 = (__m512bh)_mm512_loadu_si512(kj);                            \
                const __m512bh k1 = (__m512bh)_mm512_loadu_si512(kj + 32);                       \
                for (int g = 0; g < NG; g++)                                                     \
                    t[g][c] = (vec16)_mm512_dpbf16_ps(                                           \
                        _mm512_dpbf16_ps(_mm512_setzero_ps(), qb[g][0], k0), qb[g][1], k1);     \
            }                                                                                    \
            store_scores(t, NG, j, scale, s);                                                    \
        }                                                                                        \
        for (; j < n; j++) {                                                                     \
            const uint16_t *kj = k + (int64_t)j * 64;                                            \
            const __m512bh k0 = (__m512bh)_mm512_loadu_si512(kj);                                \
            const __m512bh k1 = (__m512bh)_mm512_loadu_si512(kj + 32);                           \
            for (int g = 0; g < NG; g++)                                                         \
                s[g][j] = sum16((vec16)_mm512_dpbf16_ps(                                         \
                              _mm512_dpbf16_ps(_mm512_setzero_ps(), qb[g][0], k0), qb[g][1],     \
                              k1)) *                                                             \
                          scale;                                                                 \
        }                                                                                        \
        softmax_rows(s, n, NG, 64, 1, part);                                                     \
        uint32_t pairs[NG][BLOCK / 2]; /* (p_j, p_j+1) as two bfloat16, p_n = 0 */               \
        if (n % 2)                                                                               \
            for (int g = 0; g < NG; g++) s[g][n] = 0.0f;                                         \
        for (int g = 0; g < NG; g++) {                                                           \
            uint32_t bits[BLOCK];                                                                \
            memcpy(bits, s[g], sizeof(float) * ((n + 1) / 2 * 2));                               \
            _Pragma("omp simd") for (int i = 0; i < (n + 1) / 2; i++) pairs[g][i] =              \
                bits[2 * i] >> 16 | (bits[2 * i + 1] & 0xffff0000u);                             \
        }                                                                                        \
        __m512 acc[NG][4];                                                                       \
        for (int g = 0; g < NG; g++)                                                             \
            for (int i = 0; i < 4; i++) acc[g][i] = _mm512_setzero_ps();                         \
        for (j = 0; j < n; j += 2) {                                                             \
            const uint16_t *va = v + (int64_t)j * 64;                                            \
            const __m512i a0 = _mm512_loadu_si512(va), a1 = _mm512_loadu_si512(va + 32);        \
            const int two = j + 1 < n; /* an odd block's last column pairs with zeros */         \
            const __m512i b0 = two ? _mm512_loadu_si512(va + 64) : _mm512_setzero_si512();       \
            const __m512i b1 = two ? _mm512_loadu_si512(va + 96) : _mm512_setzero_si512();       \
            const __m512bh u[4] = {                                                              \
                (__m512bh)_mm512_unpacklo_epi16(a0, b0), (__m512bh)_mm512_unpackhi_epi16(a0, b0), \
                (__m512bh)_mm512_unpacklo_epi16(a1, b1), (__m512bh)_mm512_unpackhi_epi16(a1, b1)}; \
            for (int g = 0; g < NG; g++) {                                                       \
                const __m512bh p = (__m512bh)_mm512_set1_epi32((int)pairs[g][j / 2]);            \
                for (int i = 0; i < 4; i++) acc[g][i] = _mm512_dpbf16_ps(acc[g][i], p, u[i]);    \
            }                                                                                    \
        }                                                                                        \
        for (int g = 0; g < NG; g++) {                                                           \
            float lanes[4][16], *out = part + g * 66 + 2;                                        \
            memcpy(lanes, acc[g], sizeof(lanes));                                                \
            for (int i = 0; i < 4; i++)                                                          \
                for (int e = 0; e < 16; e++)                                                     \
                    out[32 * (i / 2) + 8 * (e / 4) + 4 * (i % 2) + e % 4] = lanes[i][e];         \
        }                                                                                        \
    }
ATTEND_PAIRED_64(1)
ATTEND_PAIRED_64(2)
ATTEND_PAIRED_64(3)
ATTEND_PAIRED_64(4)
#endif

/* The G heads of one KV head, up to four at a time; k and v are float32, or bfloat16 where
 * kv_bf16. */
static void attend_block_64(const float *q, const void *k, const void *v, int kv_bf16, int n,
                            int G, float scale, float *part) {
    for (int g = 0; g < G; g += 4) {
        const float *qg = q + g * 64;
        float *pg = part + g * 66;
        const int ng = G - g < 4 ? G - g : 4;
        if (kv_bf16 && PAIRED) {
#if PAIRED
            switch (ng) {
            case 1: attend_paired_1(qg, k, v, n, scale, pg); break;
            case 2: attend_paired_2(qg, k, v, n, scale, pg); break;
            case 3: attend_paired_3(qg, k, v, n, scale, pg); break;
            default: attend_paired_4(qg, k, v, n, scale, pg); break;
            }
#endif
        } else if (kv_bf16) {
            switch (ng) {
            case 1: attend_bf16_1(qg, k, v, n, scale, pg); break;
            case 2: attend_bf16_2(qg, k, v, n, scale, pg); break;
            case 3: attend_bf16_3(qg, k, v, n, scale, pg); break;
            default: attend_bf16_4(qg, k, v, n, scale, pg); break;
            }
        } else {
            switch (ng) {
            case 1: attend_f32_1(qg, k, v, n, scale, pg); break;
            case 2: attend_f32_2(qg, k, v, n, scale, pg); break;
            case 3: attend_f32_3(qg, k, v, n, scale, pg); break;
            default: attend_f32_4(qg, k, v, n, scale, pg); break;
            }
        }
    }
}

static void attend_block_any(const float *q, const void *k, const void *v, int kv_bf16, int n,
                             int G, int D, float scale, float *part) {
    const int64_t size = kv_bf16 ? 2 : 4; /* bytes a cache value */
    float s[MAX_GROUP][BLOCK], column[MAX_DIM]; /* column j, widened to float32 */
    for (int j = 0; j < n; j++) {
        load_row((const char *)k + j * D * size, kv_bf16, D, column);
        for (int g = 0; g < G; g++) {
            const float *qg = q + g * D;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int d = 0; d < D; d++) dot += qg[d] * column[d];
            s[g][j] = dot * scale;
        }
    }
    softmax_rows(s, n, G, D, 0, part);
    for (int g = 0; g < G; g++) memset(part + g * (D + 2) + 2, 0, sizeof(float) * D);
    for (int j = 0; j < n; j++) {
        load_row((const char *)v + j * D * size, kv_bf16, D, column);
        for (int g = 0; g < G; g++) {
            float *acc = part + g * (D + 2) + 2;
            const float p = s[g][j];
#pragma omp simd
            for (int d = 0; d < D; d++) acc[d] += p * column[d];
        }
    }
}

/* 1 where a bfloat16 cache of 64-value heads is multiplied by bf16 units (the query and the
 * softmax weights rounded to bfloat16), 0 where it is widened (every product float32). */
int decode_attention_rounds_bf16(void) { return PAIRED; }

/* What these kernels' calls take: 2 since the KV cache may be bfloat16 (the kv_bf16 flags of
 * decode_attention, rope_attend and decode_forward), 3 since decode_forward prefills
 * (prefill_slot); a library without it is version 1. */
int decode_kernels_version(void) { return 3; }

/* q [B, H, D] and out [B, H, D] contiguous float32; keys/values [B, H_kv, capacity, D] float32,
 * or bfloat16 where kv_bf16, by strides (row_stride, head_stride, in values; a column is D
 * values); row b attends columns [0, lengths[b]). Query head h reads KV head h / (H / H_kv).
 * Returns 0, or -1 on shapes it does not take. */
int decode_attention(const float *q, const void *keys, const void *values, int kv_bf16,
                     int64_t row_stride, int64_t head_stride, int64_t capacity,
                     const int64_t *lengths, int B, int H, int H_kv, int D, float scale,
                     float *out) {
    if (B <= 0 || H_kv <= 0 || H % H_kv || H / H_kv > MAX_GROUP || D > MAX_DIM) return -1;
    for (int b = 0; b < B; b++)
        if (lengths[b] <= 0 || lengths[b] > capacity) return -1;
    const int G = H / H_kv;
    const int64_t size = kv_bf16 ? 2 : 4; /* bytes a cache value */
    int64_t *first = malloc(sizeof(int64_t) * (B + 1)); /* row b's first block index */
    if (!first) return -1;
    first[0] = 0;
    for (int b = 0; b < B; b++) first[b + 1] = first[b] + H_kv * ((lengths[b] + BLOCK - 1) / BLOCK);
    const int64_t blocks = first[B];
    float *parts = malloc(sizeof(float) * blocks * G * (D + 2));
    int64_t *block_row = malloc(sizeof(int64_t) * blocks);
    if (!parts || !block_row) {
        free(first);
        free(parts);
        free(block_row);
        return -1;
    }
    for (int b = 0; b < B; b++)
        for (int64_t i = first[b]; i < first[b + 1]; i++) block_row[i] = b;

#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < blocks; i++) {
            const int b = (int)block_row[i];
            const int64_t per_head = (lengths[b] + BLOCK - 1) / BLOCK;
            const int hk = (int)((i - first[b]) / per_head);
            const int64_t start = ((i - first[b]) % per_head) * BLOCK;
            const int64_t n = lengths[b] - start < BLOCK ? lengths[b] - start : BLOCK;
            const int64_t at = (b * row_stride + hk * head_stride + start * D) * size;
            const float *qb = q + ((int64_t)b * H + hk * G) * D;
            const char *k = (const char *)keys + at, *v = (const char *)values + at;
            float *part = parts + i * G * (D + 2);
            if (D == 64)
                attend_block_64(qb, k, v, kv_bf16, (int)n, G, scale, part);
            else
                attend_block_any(qb, k, v, kv_bf16, (int)n, G, D, scale, part);
        }
#pragma omp for
        for (int64_t bh = 0; bh < (int64_t)B * H; bh++) {
            const int b = (int)(bh / H), h = (int)(bh % H), hk = h / G, g = h % G;
            const int64_t per_head = (lengths[b] + BLOCK - 1) / BLOCK;
            const float *part = parts + ((first[b] + hk * per_head) * G + g) * (D + 2);
            const int64_t part_stride = (int64_t)G * (D + 2);
            float m = part[0], sum = 0.0f, *o = out + bh * D;
            for (int64_t c = 1; c < per_head; c++)
                m = part[c * part_stride] > m ? part[c * part_stride] : m;
            memset(o, 0, sizeof(float) * D);
            for (int64_t c = 0; c < per_head; c++) {
                const float *pc = part + c * part_stride;
                const float w = exp_nonpositive(pc[0] - m);
                sum += w * pc[1];
#pragma omp simd
                for (int d = 0; d < D; d++) o[d] += w * pc[2 + d];
            }
            const float inv = 1.0f / sum;
#pragma omp simd
            for (int d = 0; d < D; d++) o[d] *= inv;
        }
    }
    free(first);
    free(parts);
    free(block_row);
    return 0;
}
