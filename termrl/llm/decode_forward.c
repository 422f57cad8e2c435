/* A whole decode step in one call: every layer's norms, matmuls, RoPE, attention and SiLU, then
 * the final norm and the lm_head, for the rows of a batch. Built with the other decode kernels
 * into one library and loaded by decode_kernels.py (DecodeOps.forward).
 *
 * It calls the same kernels, in the same order, as decode_step._decode_fused does from Python
 * with the C matmul, so its logits are the same numbers. What it saves is the Python between
 * them: 8 calls a layer, ~240 a step, each a few microseconds of argument checks, tensor
 * allocations and ctypes conversion (~1 to 2 ms of a 25 to 35 ms step at 8 rows here).
 *
 * The model comes as a table of pointers, LAYER_POINTERS int64 values a layer (the order of
 * the enum below): the weights, packed for decode_matmul, and the layer's KV cache, laid out
 * as rope_attend reads it. Activations between the kernels live in buffers allocated here.
 *
 * The same call prefills (prefill_slot >= 0): the rows are then one sequence's new tokens, at
 * consecutive positions, all in that slot of the cache (a row stride of 0). rope_attend writes
 * every row's key and value before any row attends, and row b attends columns [0, position_b],
 * so each token sees the tokens before it and none after: causal attention, as a prefill needs.
 * The matmuls then take many rows at once, each weight block read once from memory for all of
 * them, and only the last row's logits are made.
 */
#include <stdint.h>
#include <stdlib.h>

int decode_matmul(const void *x, int bf16, int M, int K, const void *packed, int N, float *y);
int add_rms_norm(float *x, const void *delta, int delta_bf16, const float *w, float eps, int B,
                 int E, void *out, int out_bf16);
int silu_mul(const void *gate_up, int in_bf16, int B, int I, void *out, int out_bf16);
int rope_attend(const void *qkv, int qkv_bf16, const float *cos_table, const float *sin_table,
                const int64_t *positions, void *keys, void *values, int kv_bf16,
                int64_t row_stride, int64_t head_stride, int64_t capacity, int B, int H, int H_kv,
                int D, float scale, void *out, int out_bf16);

/* A layer's row of the table. */
enum { LN_IN, W_QKV, W_O, LN_POST, W_GATE_UP, W_DOWN, KEYS, VALUES, LAYER_POINTERS };

#define AT(layer, what) ((void *)(intptr_t)table[(int64_t)(layer) * LAYER_POINTERS + (what)])

/* x [B, E] float32, the rows' embeddings, becomes the residual stream (updated in place);
 * logits [B, V] float32. bf16: the weights are bfloat16, and so are the activations the
 * matmuls take (rounded as torch's .to(torch.bfloat16) rounds); the norms' weights, the
 * residual stream and every sum stay float32. kv_bf16: the KV cache is bfloat16 (else
 * float32). Each row's key and value are written to its layer's cache at the row's position,
 * and it attends columns [0, position]. prefill_slot >= 0: the rows are one sequence in that
 * slot (above), and logits [1, V] are the last row's.
 * Returns 0, or -1 on shapes a kernel does not take, a position past the cache, or no memory;
 * then the logits are not set. */
int decode_forward(const int64_t *table, int L, const float *norm, const void *lm_head, int V,
                   int bf16, int kv_bf16, const float *cos_table, const float *sin_table,
                   const int64_t *positions, int64_t row_stride, int64_t head_stride,
                   int64_t capacity, int B, int E, int H, int H_kv, int D, int I, float eps,
                   float scale, int prefill_slot, float *x, float *logits) {
    if (L <= 0 || B <= 0) return -1;
    /* A prefill's rows share one slot: the cache pointers move to it, and the rows' stride is 0. */
    const int64_t kv_offset = prefill_slot >= 0 ? prefill_slot * row_stride * (kv_bf16 ? 2 : 4) : 0;
    if (prefill_slot >= 0) row_stride = 0;
    const int64_t size = bf16 ? 2 : 4, qkv_width = (int64_t)(H + 2 * H_kv) * D;
    float *qkv = malloc(sizeof(float) * B * qkv_width);
    float *delta = malloc(sizeof(float) * B * E); /* a block's output, before the residual add */
    float *gate_up = malloc(sizeof(float) * B * 2 * I);
    void *h = malloc(size * B * E); /* the normed stream, a matmul's input */
    void *attn = malloc(size * B * H * D);
    void *act = malloc(size * B * I);
    int status = -1;
    if (!qkv || !delta || !gate_up || !h || !attn || !act) goto done;
    status = add_rms_norm(x, NULL, 0, AT(0, LN_IN), eps, B, E, h, bf16);
    for (int l = 0; l < L && status == 0; l++) {
        /* The next layer's input norm (or the final one) closes this layer. */
        const float *next_norm = l + 1 < L ? AT(l + 1, LN_IN) : norm;
        status = decode_matmul(h, bf16, B, E, AT(l, W_QKV), (int)qkv_width, qkv);
        if (status == 0)
            status = rope_attend(qkv, 0, cos_table, sin_table, positions,
                                 (char *)AT(l, KEYS) + kv_offset, (char *)AT(l, VALUES) + kv_offset,
                                 kv_bf16, row_stride, head_stride, capacity, B, H, H_kv, D, scale,
                                 attn, bf16);
        if (status == 0) status = decode_matmul(attn, bf16, B, H * D, AT(l, W_O), E, delta);
        if (status == 0) status = add_rms_norm(x, delta, 0, AT(l, LN_POST), eps, B, E, h, bf16);
        if (status == 0) status = decode_matmul(h, bf16, B, E, AT(l, W_GATE_UP), 2 * I, gate_up);
        if (status == 0) status = silu_mul(gate_up, 0, B, I, act, bf16);
        if (status == 0) status = decode_matmul(act, bf16, B, I, AT(l, W_DOWN), E, delta);
        if (status == 0) status = add_rms_norm(x, delta, 0, next_norm, eps, B, E, h, bf16);
    }
    if (status == 0 && prefill_slot >= 0) /* the last row's logits: what picks the next token */
        status = decode_matmul((char *)h + (int64_t)(B - 1) * E * size, bf16, 1, E, lm_head, V,
                               logits);
    else if (status == 0)
        status = decode_matmul(h, bf16, B, E, lm_head, V, logits);
done:
    free(qkv);
    free(delta);
    free(gate_up);
    free(h);
    free(attn);
    free(act);
    return status;
}
