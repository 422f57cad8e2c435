/* The decode step's matmuls on a CPU: y [M, N] = x [M, K] @ W^T for the few rows of a decode
 * batch, W [N, K] being a layer's weight matrix. Built with the other decode kernels into one
 * library and loaded by decode_kernels.py.
 *
 * With few rows a matmul is a pass over W, and the pass is what costs: every weight is read
 * from memory once a step. So W is repacked once, into blocks of NB output columns laid out k
 * by k ([N / NB][K][NB]): a block is one sequential stream, and each k's NB weights are loaded
 * once for all the rows (their x[m][k] broadcast) into NB * 8 accumulators that stay in
 * registers for the whole of K. No sum across lanes is ever needed. The threads take whole
 * blocks. Measured on a 2-core AMD EPYC (Zen 4), a 30-layer stack of SmolLM2-135M's matrices
 * at 8 rows: 29 GB/s in float32 and 27 in bfloat16, against 21 and 18 for oneDNN's GEMM on
 * its own prepacked weights (bench/kernels_ab.py, docs/experiments.md).
 *
 * bfloat16 weights take bfloat16 rows and multiply them in pairs along k with AVX512-BF16's
 * dot product where the compiler targets it (pairs packed [N / NB][K / 2][NB][2]); elsewhere
 * the weights are widened to float32 as they are loaded ([N / NB][K][NB]). Either way the sums
 * are float32 and y is float32.
 */
#include <stdint.h>
#include <string.h>

#include "decode_math.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#define PAIRED 1 /* bf16 weights packed in pairs along k, multiplied by vdpbf16ps */
#else
#define PAIRED 0
#endif

#define NB 48      /* output columns a block: three 16-float vectors */
#define ROWS 8     /* rows a pass over a block (a batch of more goes 8 rows at a time) */

typedef float v16 __attribute__((vector_size(64)));

static inline v16 splat(float f) {
    return (v16){f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f};
}

static inline int paired(int bf16) { return bf16 && PAIRED; }

/* How many elements of W's type the packed copy of an [N, K] matrix takes. */
int64_t packed_elements(int bf16, int N, int K) {
    const int64_t blocks = (N + NB - 1) / NB, depth = paired(bf16) ? (K + 1) / 2 * 2 : K;
    return blocks * depth * NB;
}

/* W [N, K] (float32, or bfloat16 where bf16) into packed, zero-padded to whole blocks (and to
 * an even K where paired). */
void pack_matrix(const void *w, int bf16, int N, int K, void *packed) {
    const int64_t blocks = (N + NB - 1) / NB;
    if (paired(bf16)) {
        const uint16_t *src = w;
        uint16_t *dst = packed;
        const int pairs = (K + 1) / 2;
        for (int64_t b = 0; b < blocks; b++)
            for (int p = 0; p < pairs; p++)
                for (int j = 0; j < NB; j++)
                    for (int t = 0; t < 2; t++) {
                        const int64_t n = b * NB + j, k = 2 * p + t;
                        dst[((b * pairs + p) * NB + j) * 2 + t] =
                            n < N && k < K ? src[n * K + k] : 0;
                    }
        return;
    }
    const int64_t size = bf16 ? 2 : 4;
    for (int64_t b = 0; b < blocks; b++)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < NB; j++) {
                const int64_t n = b * NB + j;
                char *to = (char *)packed + ((b * K + k) * NB + j) * size;
                if (n < N)
                    memcpy(to, (const char *)w + (n * K + k) * size, size);
                else
                    memset(to, 0, size);
            }
}

/* Rows [0, M) of one block, M <= ROWS: acc[m] = x[m] @ the block's NB columns. M is a
 * constant in each instance (block_rows below), so acc stays in registers. */
static inline void block_f32(const float *x, int64_t ldx, int M, int K, const float *w,
                             v16 acc[ROWS][3]) {
    for (int k = 0; k < K; k++) {
        const float *wk = w + (int64_t)k * NB;
        const v16 w0 = load_f32x16(wk), w1 = load_f32x16(wk + 16), w2 = load_f32x16(wk + 32);
        for (int m = 0; m < M; m++) {
            const v16 b = splat(x[m * ldx + k]);
            acc[m][0] += b * w0;
            acc[m][1] += b * w1;
            acc[m][2] += b * w2;
        }
    }
}

static inline void block_bf16(const uint16_t *x, int64_t ldx, int M, int K, const uint16_t *w,
                              v16 acc[ROWS][3]) {
#if PAIRED
    for (int p = 0; p < K / 2; p++) { /* K is even here: odd K goes to the widening loop */
        const uint16_t *wp = w + (int64_t)p * NB * 2;
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wp);
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512(wp + 32);
        const __m512bh w2 = (__m512bh)_mm512_loadu_si512(wp + 64);
        for (int m = 0; m < M; m++) {
            uint32_t pair;
            memcpy(&pair, x + m * ldx + 2 * p, sizeof pair);
            const __m512bh b = (__m512bh)_mm512_set1_epi32((int)pair);
            acc[m][0] = (v16)_mm512_dpbf16_ps((__m512)acc[m][0], b, w0);
            acc[m][1] = (v16)_mm512_dpbf16_ps((__m512)acc[m][1], b, w1);
            acc[m][2] = (v16)_mm512_dpbf16_ps((__m512)acc[m][2], b, w2);
        }
    }
#else
    for (int k = 0; k < K; k++) {
        const uint16_t *wk = w + (int64_t)k * NB;
        const v16 w0 = load_bf16x16(wk), w1 = load_bf16x16(wk + 16), w2 = load_bf16x16(wk + 32);
        for (int m = 0; m < M; m++) {
            const v16 b = splat(bf16_to_float(x[m * ldx + k]));
            acc[m][0] += b * w0;
            acc[m][1] += b * w1;
            acc[m][2] += b * w2;
        }
    }
#endif
}

/* y's rows [0, M) at one block's columns [0, n) from the block's packed weights. */
static inline void block_rows(const void *x, int bf16, int64_t ldx, int M, int K, const void *w,
                              float *y, int64_t ldy, int n) {
    v16 acc[ROWS][3];
    for (int m = 0; m < M; m++) acc[m][0] = acc[m][1] = acc[m][2] = splat(0.0f);
    if (bf16)
        block_bf16(x, ldx, M, K, w, acc);
    else
        block_f32(x, ldx, M, K, w, acc);
    for (int m = 0; m < M; m++) {
        float out[NB];
        memcpy(out, acc[m], sizeof out);
        memcpy(y + m * ldy, out, sizeof(float) * n);
    }
}

/* One instance per row count, so that each has its loops over m unrolled. */
#define BLOCK_ROWS(M)                                                                         \
    static void block_rows_##M(const void *x, int bf16, int64_t ldx, int K, const void *w,   \
                               float *y, int64_t ldy, int n) {                               \
        block_rows(x, bf16, ldx, M, K, w, y, ldy, n);                                        \
    }
BLOCK_ROWS(1)
BLOCK_ROWS(2)
BLOCK_ROWS(3)
BLOCK_ROWS(4)
BLOCK_ROWS(5)
BLOCK_ROWS(6)
BLOCK_ROWS(7)
BLOCK_ROWS(8)

typedef void (*block_fn)(const void *, int, int64_t, int, const void *, float *, int64_t, int);
static const block_fn BLOCKS[ROWS + 1] = {
    NULL,           block_rows_1, block_rows_2, block_rows_3, block_rows_4,
    block_rows_5,   block_rows_6, block_rows_7, block_rows_8,
};

/* y [M, N] float32 = x [M, K] @ W^T, W packed by pack_matrix; x has W's type. Returns 0, or -1
 * on sizes it does not take. */
int decode_matmul(const void *x, int bf16, int M, int K, const void *packed, int N, float *y) {
    if (M <= 0 || K <= 0 || N <= 0) return -1;
    const int blocks = (N + NB - 1) / NB, size = bf16 ? 2 : 4;
    const int64_t block_elements = packed_elements(bf16, NB, K);
    /* An odd K is packed padded to even where paired; the pairs loop covers it only when x is
     * padded too, so such a matrix is not taken (Llama's widths are even). */
    if (paired(bf16) && K % 2) return -1;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        const char *w = (const char *)packed + b * block_elements * size;
        const int n = N - b * NB < NB ? N - b * NB : NB;
        for (int m0 = 0; m0 < M; m0 += ROWS) {
            const int rows = M - m0 < ROWS ? M - m0 : ROWS;
            BLOCKS[rows]((const char *)x + (int64_t)m0 * K * size, bf16, K, K, w,
                         y + (int64_t)m0 * N + (int64_t)b * NB, N, n);
        }
    }
    return 0;
}
