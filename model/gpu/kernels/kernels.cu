// Kernels of gorun's GPU backend (package model/gpu). Each matches the
// arithmetic of the CPU backend (package model/cpu) up to summation order.
// `go generate ./model/gpu` compiles this file to kernels.ptx for the
// oldest architecture CUDA 13 supports, which newer GPUs JIT-compile at
// load; the PTX is committed so building gorun needs no CUDA toolkit.

#include <cuda_fp16.h>

// Indices are 32-bit: the backend refuses tensors of 2^31 elements or
// more, and 64-bit division costs a GPU several times as much.
#define GRID_STRIDE(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

// ---- 16-bit formats ------------------------------------------------------
// Autocast's operands travel as 16-bit codes (unsigned short): bfloat16
// (kind BF16) or IEEE half (kind FP16), rounded to nearest even as the
// CPU's ring.NewBFloat16 and ring.NewFloat16 round.
#define BF16 0
#define FP16 1
#define NO_ROUNDING -1

__device__ __forceinline__ unsigned short to16(float f, int kind) {
    if (kind == FP16) return __half_as_ushort(__float2half_rn(f));
    unsigned int b = __float_as_uint(f);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN: torch's canonical one
    return (unsigned short)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float from16(unsigned short h, int kind) {
    if (kind == FP16) return __half2float(__ushort_as_half(h));
    return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ float round16(float f, int kind) { return from16(to16(f, kind), kind); }

// The relu as the relu kernel computes it (a NaN passes).
__device__ __forceinline__ float relu_of(float v) { return v > 0.f ? v : (v != v ? v : 0.f); }

// A fused batch norm's relu mask, found again in backward: the forward
// pass's output x·scale + shift (the same float arithmetic as bn_apply)
// was positive. relu_beta is the batch norm's beta when its relu is fused,
// else 0 (no mask).
__device__ __forceinline__ float masked_dy(float g, float x, const float* gamma, const float* relu_beta,
                                           const float* mean, const float* invstd, int ch) {
    if (relu_beta == 0) return g;
    float scale = invstd[ch] * gamma[ch];
    float shift = relu_beta[ch] - mean[ch] * scale;
    return x * scale + shift > 0.f ? g : 0.f;
}

extern "C" {

// ---- bias ----------------------------------------------------------------

// x[i] += b[channel of i] for x [n, c, hw].
__global__ void add_bias(float* x, const float* b, int total, int c, int hw) {
    GRID_STRIDE(i, total) { x[i] += b[(i / hw) % c]; }
}

// Block reduction of a double over blockDim.x (a power of two, <= 1024).
__device__ double block_sum(double v, double* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// partial[ch·parts + part] = Σ of part's share of dy[:, ch, :] for dy
// [n, c, hw]; grid (c, parts). sum_partials adds each channel's parts in
// order, so the result does not depend on scheduling.
__global__ void channel_partials(const float* dy, double* partial, int n, int c, int hw, int kind) {
    extern __shared__ double sh[];
    int ch = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
    int total = n * hw;
    int per = (total + parts - 1) / parts;
    int lo = part * per, hi = min(total, lo + per);
    double s = 0;
    for (int k = lo + threadIdx.x; k < hi; k += blockDim.x) {
        float v = dy[((k / hw) * c + ch) * hw + k % hw];
        s += kind == NO_ROUNDING ? v : round16(v, kind);
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[ch * parts + part] = s;
}

// db[ch] += Σ_part partial[ch·parts + part], the sum rounded to a 16-bit
// format first when kind is one (autocast's bias gradient; see round16).
__global__ void sum_partials(const double* partial, float* db, int c, int parts, int kind) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double s = 0;
    for (int p = 0; p < parts; p++) s += partial[ch * parts + p];
    db[ch] += kind == NO_ROUNDING ? (float)s : round16((float)s, kind);
}

// ---- convolution helpers --------------------------------------------------

// col[r][img][p] with r = (ci, ki, kj), p = (oy, ox): the im2col matrix of
// the whole batch, [c·kh·kw, n·oh·ow].
__global__ void im2col(const float* x, float* col, int n, int c, int h, int w,
                       int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow) {
    int ohw = oh * ow;
    int total = c * kh * kw * n * ohw;
    GRID_STRIDE(idx, total) {
        int p = idx % ohw;
        int t = idx / ohw;
        int img = t % n;
        int r = t / n;
        int kj = r % kw, ki = (r / kw) % kh, ci = r / (kw * kh);
        int oy = p / ow, ox = p % ow;
        int y = oy * sh - ph + ki, xx = ox * sw - pw + kj;
        col[idx] = (y >= 0 && y < h && xx >= 0 && xx < w) ? x[((img * c + ci) * h + y) * w + xx] : 0.f;
    }
}

// dx[img][ci][y][x] = Σ over the column entries im2col copied it to.
__global__ void col2im(const float* col, float* dx, int n, int c, int h, int w,
                       int kh, int kw, int sh, int sw, int ph, int pw, int oh, int ow) {
    int total = n * c * h * w;
    int ohw = oh * ow;
    GRID_STRIDE(idx, total) {
        int xx = idx % w;
        int y = (idx / w) % h;
        int ci = (idx / (w * h)) % c;
        int img = idx / (w * h * c);
        float s = 0;
        for (int ki = 0; ki < kh; ki++) {
            int ty = y + ph - ki;
            if (ty < 0 || ty % sh != 0) continue;
            int oy = ty / sh;
            if (oy >= oh) continue;
            for (int kj = 0; kj < kw; kj++) {
                int tx = xx + pw - kj;
                if (tx < 0 || tx % sw != 0) continue;
                int ox = tx / sw;
                if (ox >= ow) continue;
                int r = (ci * kh + ki) * kw + kj;
                s += col[(r * n + img) * ohw + oy * ow + ox];
            }
        }
        dx[idx] = s;
    }
}

// dst[f][img][p] = src[img][f][p].
__global__ void nfp_to_fnp(const float* src, float* dst, int n, int f, int p) {
    int total = n * f * p;
    GRID_STRIDE(idx, total) {
        int q = idx % p;
        int t = idx / p;
        int fi = t % f, img = t / f;
        dst[(fi * n + img) * p + q] = src[idx];
    }
}

// dst[img][f][p] = src[f][img][p] (+ bias[f] unless bias is null).
__global__ void fnp_to_nfp(const float* src, float* dst, const float* bias, int n, int f, int p) {
    int total = n * f * p;
    GRID_STRIDE(idx, total) {
        int q = idx % p;
        int t = idx / p;
        int fi = t % f, img = t / f;
        float v = src[(fi * n + img) * p + q];
        dst[idx] = bias ? v + bias[fi] : v;
    }
}

// ---- pooling ----------------------------------------------------------------

// Window of output o aint one axis: fixed (kernel k, stride s, padding
// pad, the divisor counting padding) or adaptive (PyTorch's bounds).
__device__ void window(int o, int adaptive, int k, int s, int pad, int in, int out, int* lo, int* hi, int* span) {
    if (adaptive) {
        *lo = (int)(o * in / out);
        *hi = (int)(((o + 1) * in + out - 1) / out);
        *span = *hi - *lo;
        return;
    }
    int l = o * s - pad;
    int h = min(l + k, in + pad);
    *span = h - l;
    *lo = max(l, 0);
    *hi = min(h, in);
}

// The first maximum of output idx's window, a NaN winning: its index in x.
__device__ int argmax_window(const float* x, int idx, int h, int w, int oh, int ow,
                              int kh, int kw, int sh, int sw, int ph, int pw, float* best) {
    int ox = idx % ow;
    int oy = (idx / ow) % oh;
    int plane = idx / (ow * oh);
    int h0, h1, w0, w1, span;
    window(oy, 0, kh, sh, ph, h, oh, &h0, &h1, &span);
    window(ox, 0, kw, sw, pw, w, ow, &w0, &w1, &span);
    const float* in = x + plane * h * w;
    float b = -INFINITY;
    int at = h0 * w + w0;
    for (int r = h0; r < h1; r++)
        for (int q = w0; q < w1; q++) {
            float v = in[r * w + q];
            if (v > b || v != v) { b = v; at = r * w + q; }
        }
    *best = b;
    return (h1 > h0 && w1 > w0) ? plane * h * w + at : -1;
}

__global__ void maxpool(const float* x, float* y, int total, int h, int w, int oh, int ow,
                        int kh, int kw, int sh, int sw, int ph, int pw) {
    GRID_STRIDE(idx, total) {
        float b;
        argmax_window(x, idx, h, w, oh, ow, kh, kw, sh, sw, ph, pw, &b);
        y[idx] = b;
    }
}

// dx must be zero: each output's gradient is added at its window's maximum.
__global__ void maxpool_backward(const float* x, const float* dy, float* dx, int total, int h, int w, int oh, int ow,
                                 int kh, int kw, int sh, int sw, int ph, int pw) {
    GRID_STRIDE(idx, total) {
        float b;
        int at = argmax_window(x, idx, h, w, oh, ow, kh, kw, sh, sw, ph, pw, &b);
        if (at >= 0) atomicAdd(dx + at, dy[idx]);
    }
}

// Output idx's plane, input window and divisor (the window's unclipped
// area for fixed windows, as count_include_pad; its area when adaptive).
__device__ void avg_window(int idx, int h, int w, int oh, int ow, int adaptive, int kh, int kw, int sh, int sw, int ph, int pw,
                           int* plane, int* h0, int* h1, int* w0, int* w1, int* span) {
    int hs, ws;
    *plane = idx / (ow * oh);
    window((idx / ow) % oh, adaptive, kh, sh, ph, h, oh, h0, h1, &hs);
    window(idx % ow, adaptive, kw, sw, pw, w, ow, w0, w1, &ws);
    *span = hs * ws;
}

// Average pooling, fixed (adaptive 0) or adaptive windows.
__global__ void avgpool(const float* x, float* y, int total, int h, int w, int oh, int ow, int adaptive,
                        int kh, int kw, int sh, int sw, int ph, int pw) {
    GRID_STRIDE(idx, total) {
        int plane, h0, h1, w0, w1, span;
        avg_window(idx, h, w, oh, ow, adaptive, kh, kw, sh, sw, ph, pw, &plane, &h0, &h1, &w0, &w1, &span);
        const float* in = x + plane * h * w;
        float s = 0;
        for (int r = h0; r < h1; r++)
            for (int q = w0; q < w1; q++) s += in[r * w + q];
        y[idx] = s / (float)span;
    }
}

// dx must be zero.
__global__ void avgpool_backward(const float* dy, float* dx, int total, int h, int w, int oh, int ow, int adaptive,
                                 int kh, int kw, int sh, int sw, int ph, int pw) {
    GRID_STRIDE(idx, total) {
        int plane, h0, h1, w0, w1, span;
        avg_window(idx, h, w, oh, ow, adaptive, kh, kw, sh, sw, ph, pw, &plane, &h0, &h1, &w0, &w1, &span);
        float v = dy[idx] / (float)span;
        float* out = dx + plane * h * w;
        for (int r = h0; r < h1; r++)
            for (int q = w0; q < w1; q++) atomicAdd(out + r * w + q, v);
    }
}

// ---- batch normalisation ------------------------------------------------------

// The reductions over a channel's N·HW elements of x [n, c, hw] run on a
// grid (c, parts): block (ch, part) takes part's contiguous share of the
// channel's elements and writes one partial sum, and a second kernel adds
// each channel's partials in order, so the result does not depend on how
// the GPU schedules the blocks, and every multiprocessor has work even
// where a layer has few channels.

// Walks block (ch, part)'s share of channel ch: body sees i, the index of
// each element in x, with one division per thread rather than per element.
#define CHANNEL_SHARE(i, n, c, hw, body)                                      \
    {                                                                         \
        int total_ = (n) * (hw), parts_ = gridDim.y;                          \
        int per_ = (total_ + parts_ - 1) / parts_;                            \
        int lo_ = blockIdx.y * per_, hi_ = min(total_, lo_ + per_);           \
        int k_ = lo_ + threadIdx.x, img_ = k_ / (hw), off_ = k_ - img_ * (hw); \
        int stepImg_ = blockDim.x / (hw), stepOff_ = blockDim.x - stepImg_ * (hw); \
        for (; k_ < hi_; k_ += blockDim.x) {                                  \
            int i = (img_ * (c) + blockIdx.x) * (hw) + off_;                  \
            body;                                                             \
            img_ += stepImg_;                                                 \
            off_ += stepOff_;                                                 \
            if (off_ >= (hw)) { off_ -= (hw); img_++; }                       \
        }                                                                     \
    }

// ShareCursor walks one thread's elements of block (ch, part)'s share of
// channel ch, as CHANNEL_SHARE does, handing out indices so that a loop
// can load several before it uses them (four loads in flight per thread
// instead of one: the reductions are bound by memory latency otherwise).
struct ShareCursor {
    int img, off, stepImg, stepOff, hw, c, ch, left;
    __device__ ShareCursor(int n, int c_, int hw_) : hw(hw_), c(c_), ch(blockIdx.x) {
        int total = n * hw, parts = gridDim.y;
        int per = (total + parts - 1) / parts;
        int lo = blockIdx.y * per, hi = min(total, lo + per);
        int k = lo + threadIdx.x;
        left = k < hi ? (hi - k + blockDim.x - 1) / blockDim.x : 0;
        img = k / hw;
        off = k - img * hw;
        stepImg = blockDim.x / hw;
        stepOff = blockDim.x - stepImg * hw;
    }
    // next returns the index of the next element in x and moves on.
    __device__ __forceinline__ int next() {
        int i = (img * c + ch) * hw + off;
        img += stepImg;
        off += stepOff;
        if (off >= hw) { off -= hw; img++; }
        return i;
    }
};

// SHARE_UNROLLED runs its body (the last arguments) on each value v = x[i] of the thread's
// elements, loading four at a time.
#define SHARE_UNROLLED(cur, x, v, ...)                                            \
    {                                                                              \
        for (; (cur).left >= 4; (cur).left -= 4) {                                 \
            int i0_ = (cur).next(), i1_ = (cur).next(), i2_ = (cur).next(), i3_ = (cur).next(); \
            float a0_ = (x)[i0_], a1_ = (x)[i1_], a2_ = (x)[i2_], a3_ = (x)[i3_];   \
            { float v = a0_; __VA_ARGS__; }                                        \
            { float v = a1_; __VA_ARGS__; }                                        \
            { float v = a2_; __VA_ARGS__; }                                        \
            { float v = a3_; __VA_ARGS__; }                                        \
        }                                                                          \
        for (; (cur).left > 0; (cur).left--) {                                     \
            float v = (x)[(cur).next()];                                           \
            __VA_ARGS__;                                                           \
        }                                                                          \
    }

// partial[ch·parts + part] = Σ x over block (ch, part)'s share.
__global__ void bn_sum_parts(const float* x, double* partial, int n, int c, int hw) {
    extern __shared__ double sh[];
    double s = 0;
    ShareCursor cur(n, c, hw);
    SHARE_UNROLLED(cur, x, v, s += v);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x * gridDim.y + blockIdx.y] = s;
}

// partial[ch·parts + part] = Σ (x − sums[ch]/count)² over the share.
__global__ void bn_sqdev_parts(const float* x, const double* sums, double count, double* partial, int n, int c, int hw) {
    extern __shared__ double sh[];
    double mean = sums[blockIdx.x] / count, s = 0;
    ShareCursor cur(n, c, hw);
    SHARE_UNROLLED(cur, x, v, { double d = (double)v - mean; s += d * d; });
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x * gridDim.y + blockIdx.y] = s;
}

// out[ch] = Σ_part partial[ch·parts + part], in order.
__global__ void add_parts(const double* partial, double* out, int c, int parts) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double s = 0;
    for (int p = 0; p < parts; p++) s += partial[ch * parts + p];
    out[ch] = s;
}

// Running statistics and the saved mean and 1/std from the batch's sums.
__global__ void bn_finish(const double* sums, const double* sq, double count, float* run_mean, float* run_var,
                          float* save_mean, float* save_invstd, int c, float momentum, float eps) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double mean = sums[ch] / count;
    double var = sq[ch] / count;
    double unbiased = count > 1 ? sq[ch] / (count - 1) : var;
    double mom = momentum;
    run_mean[ch] = (float)((1 - mom) * (double)run_mean[ch] + mom * mean);
    run_var[ch] = (float)((1 - mom) * (double)run_var[ch] + mom * unbiased);
    save_mean[ch] = (float)mean;
    save_invstd[ch] = (float)(1 / sqrt(var + (double)eps));
}

// Evaluation: the saved statistics are the running ones.
__global__ void bn_eval_stats(const float* run_mean, const float* run_var, float* save_mean, float* save_invstd, int c, float eps) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    save_mean[ch] = run_mean[ch];
    save_invstd[ch] = (float)(1 / sqrt((double)run_var[ch] + (double)eps));
}

// y = x·scale + shift per channel, then the relu when relu is 1 (a fused
// batch norm → relu).
__global__ void bn_apply(const float* x, float* y, const float* gamma, const float* beta, const float* mean,
                         const float* invstd, int relu, int total, int c, int hw) {
    GRID_STRIDE(i, total) {
        int ch = (i / hw) % c;
        float scale = invstd[ch] * gamma[ch];
        float shift = beta[ch] - mean[ch] * scale;
        float v = x[i] * scale + shift;
        y[i] = relu ? relu_of(v) : v;
    }
}

// The _planes kernels run over x [planes, hw] with large planes (hw ≥
// 256): grid (planes, ⌈hw/1024⌉), 256 threads, each thread four elements
// of one plane, all four loaded before any is used (one load in flight
// per thread leaves the memory system idle), and the channel's constants
// read once rather than an index divided per element.
#define SEGMENT 1024
#define PER_THREAD 4

__global__ void bn_apply_planes(const float* x, float* y, const float* gamma, const float* beta,
                                const float* mean, const float* invstd, int relu, int c, int hw) {
    int ch = blockIdx.x % c;
    float scale = invstd[ch] * gamma[ch];
    float shift = beta[ch] - mean[ch] * scale;
    size_t base = (size_t)blockIdx.x * hw;
    int j = blockIdx.y * SEGMENT + threadIdx.x;
    float v[PER_THREAD];
#pragma unroll
    for (int u = 0; u < PER_THREAD; u++) {
        int k = j + u * (SEGMENT / PER_THREAD);
        v[u] = k < hw ? x[base + k] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < PER_THREAD; u++) {
        int k = j + u * (SEGMENT / PER_THREAD);
        if (k < hw) {
            float o = v[u] * scale + shift;
            y[base + k] = relu ? relu_of(o) : o;
        }
    }
}

// partial[2(ch·parts + part)] = Σdy and [… + 1] = Σdy·x̂ over the share.
// (relu_beta: see masked_dy.)
__global__ void bn_backward_parts(const float* x, const float* dy, const float* mean, const float* invstd,
                                  const float* gamma, const float* relu_beta, double* partial, int n, int c, int hw) {
    extern __shared__ double sh[];
    int ch = blockIdx.x;
    double m = mean[ch], is = invstd[ch], sdy = 0, sdx = 0;
    ShareCursor cur(n, c, hw);
    for (; cur.left >= 4; cur.left -= 4) {
        int i0 = cur.next(), i1 = cur.next(), i2 = cur.next(), i3 = cur.next();
        float g0 = dy[i0], g1 = dy[i1], g2 = dy[i2], g3 = dy[i3];
        float x0 = x[i0], x1 = x[i1], x2 = x[i2], x3 = x[i3];
        g0 = masked_dy(g0, x0, gamma, relu_beta, mean, invstd, ch);
        g1 = masked_dy(g1, x1, gamma, relu_beta, mean, invstd, ch);
        g2 = masked_dy(g2, x2, gamma, relu_beta, mean, invstd, ch);
        g3 = masked_dy(g3, x3, gamma, relu_beta, mean, invstd, ch);
        sdy += (double)g0;
        sdx += (double)g0 * ((double)x0 - m) * is;
        sdy += (double)g1;
        sdx += (double)g1 * ((double)x1 - m) * is;
        sdy += (double)g2;
        sdx += (double)g2 * ((double)x2 - m) * is;
        sdy += (double)g3;
        sdx += (double)g3 * ((double)x3 - m) * is;
    }
    for (; cur.left > 0; cur.left--) {
        int i = cur.next();
        float xv = x[i];
        double g = masked_dy(dy[i], xv, gamma, relu_beta, mean, invstd, ch);
        sdy += g;
        sdx += g * ((double)xv - m) * is;
    }
    sdy = block_sum(sdy, sh);
    sdx = block_sum(sdx, sh);
    if (threadIdx.x == 0) {
        int at = 2 * (blockIdx.x * gridDim.y + blockIdx.y);
        partial[at] = sdy;
        partial[at + 1] = sdx;
    }
}

// sums[2ch] = Σdy, sums[2ch+1] = Σdy·x̂ from the partials, in order;
// dgamma += Σdy·x̂, dbeta += Σdy.
__global__ void bn_backward_finish(const double* partial, double* sums, float* dgamma, float* dbeta, int c, int parts) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double sdy = 0, sdx = 0;
    for (int p = 0; p < parts; p++) {
        sdy += partial[2 * (ch * parts + p)];
        sdx += partial[2 * (ch * parts + p) + 1];
    }
    sums[2 * ch] = sdy;
    sums[2 * ch + 1] = sdx;
    dgamma[ch] += (float)sdx;
    dbeta[ch] += (float)sdy;
}

// bn_backward_dx over large planes (see bn_apply_planes).
__global__ void bn_backward_dx_planes(const float* x, const float* dy, float* dx, const float* gamma, const float* relu_beta,
                                      const float* mean, const float* invstd, const double* sums, double count,
                                      int training, int c, int hw) {
    int ch = blockIdx.x % c;
    double is = invstd[ch], g = gamma[ch], m = mean[ch];
    double k = g * is / count, sdy = sums[2 * ch], sdx = sums[2 * ch + 1];
    float eval = (float)(g * is);
    size_t base = (size_t)blockIdx.x * hw;
    int j = blockIdx.y * SEGMENT + threadIdx.x;
    float xv[PER_THREAD], gv[PER_THREAD];
#pragma unroll
    for (int u = 0; u < PER_THREAD; u++) {
        int e = j + u * (SEGMENT / PER_THREAD);
        gv[u] = e < hw ? dy[base + e] : 0.f;
        xv[u] = e < hw && (training || relu_beta != 0) ? x[base + e] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < PER_THREAD; u++) gv[u] = masked_dy(gv[u], xv[u], gamma, relu_beta, mean, invstd, ch);
#pragma unroll
    for (int u = 0; u < PER_THREAD; u++) {
        int e = j + u * (SEGMENT / PER_THREAD);
        if (e >= hw) continue;
        if (!training) {
            dx[base + e] = gv[u] * eval;
        } else {
            double xhat = ((double)xv[u] - m) * is;
            dx[base + e] = (float)(k * (count * (double)gv[u] - sdy - xhat * sdx));
        }
    }
}

__global__ void bn_backward_dx(const float* x, const float* dy, float* dx, const float* gamma, const float* relu_beta,
                               const float* mean, const float* invstd, const double* sums, double count, int training,
                               int total, int c, int hw) {
    GRID_STRIDE(i, total) {
        int ch = (i / hw) % c;
        double is = invstd[ch], g = gamma[ch];
        float xv = x[i];
        float gy = masked_dy(dy[i], xv, gamma, relu_beta, mean, invstd, ch);
        if (!training) {
            dx[i] = gy * (float)(g * is);
            continue;
        }
        double xhat = ((double)xv - (double)mean[ch]) * is;
        double k = g * is / count;
        dx[i] = (float)(k * (count * (double)gy - sums[2 * ch] - xhat * sums[2 * ch + 1]));
    }
}

// ---- element-wise ---------------------------------------------------------------

__global__ void relu(const float* x, float* y, int n) {
    GRID_STRIDE(i, n) { y[i] = relu_of(x[i]); }
}

// z = relu(x + y): a residual block's sum and its relu in one pass.
__global__ void add_relu(const float* x, const float* y, float* z, int n) {
    GRID_STRIDE(i, n) { z[i] = relu_of(x[i] + y[i]); }
}

__global__ void relu_backward(const float* y, const float* dy, float* dx, int n) {
    GRID_STRIDE(i, n) { dx[i] = y[i] > 0.f ? dy[i] : 0.f; }
}

// The CPU backend's counter-based generator: splitmix64 of (seed, i), 24 bits.
__device__ float uniform(unsigned long long seed, unsigned long long i) {
    unsigned long long z = seed + (i + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

__global__ void dropout(const float* x, float* y, float* mask, int n, float p, unsigned long long seed) {
    float keep = p < 1.f ? 1.f / (1.f - p) : 0.f;
    GRID_STRIDE(i, n) {
        float f = uniform(seed, (unsigned long long)i) < p ? 0.f : keep;
        mask[i] = f;
        y[i] = x[i] * f;
    }
}

__global__ void mul(const float* x, const float* y, float* z, int n) {
    GRID_STRIDE(i, n) { z[i] = x[i] * y[i]; }
}

__global__ void add(const float* x, const float* y, float* z, int n) {
    GRID_STRIDE(i, n) { z[i] = x[i] + y[i]; }
}

// ---- softmax and loss -------------------------------------------------------------

// One warp per row of x [n, c].
__global__ void log_softmax(const float* x, float* y, int n, int c) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n) return;
    const float* in = x + row * c;
    float* out = y + row * c;
    float mx = -INFINITY;
    for (int j = lane; j < c; j += 32) mx = fmaxf(mx, in[j]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    double s = 0;
    for (int j = lane; j < c; j += 32) s += exp((double)(in[j] - mx));
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    float lse = mx + (float)log(s);
    for (int j = lane; j < c; j += 32) out[j] = in[j] - lse;
}

__global__ void log_softmax_backward(const float* y, const float* dy, float* dx, int n, int c) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n) return;
    const float* out = y + row * c;
    const float* g = dy + row * c;
    float* d = dx + row * c;
    float s = 0;
    for (int j = lane; j < c; j += 32) s += g[j];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    for (int j = lane; j < c; j += 32) d[j] = g[j] - expf(out[j]) * s;
}

// out[0] = mean over rows of −logp[i, target[i]]; one block.
__global__ void nll_loss(const float* logp, const int* target, float* out, int n, int c) {
    extern __shared__ double sh[];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s -= logp[i * c + target[i]];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = (float)(s / n);
}

// dlogp must be zero: dlogp[i, target[i]] = −scale/n.
__global__ void nll_loss_backward(const int* target, float* dlogp, int n, int c, float scale) {
    GRID_STRIDE(i, n) { dlogp[i * c + target[i]] = -scale / (float)n; }
}

// ---- optimizers (torch.optim's arithmetic) --------------------------------------------

__global__ void sgd_step(float* p, const float* g, float* buf, int n, float lr, float momentum, float dampening,
                         float weight_decay, int nesterov, int first) {
    GRID_STRIDE(i, n) {
        float w = p[i], d = g[i];
        if (weight_decay != 0.f) d += weight_decay * w;
        if (momentum != 0.f) {
            float b = first ? d : momentum * buf[i] + (1.f - dampening) * d;
            buf[i] = b;
            d = nesterov ? d + momentum * b : b;
        }
        p[i] = w - lr * d;
    }
}

__global__ void adam_step(float* p, const float* g, float* m, float* v, int n, float beta1, float beta2, float eps,
                          float weight_decay, float step_size, float bc2_sqrt) {
    GRID_STRIDE(i, n) {
        float w = p[i], d = g[i];
        if (weight_decay != 0.f) d += weight_decay * w;
        float mi = m[i] + (d - m[i]) * (1.f - beta1);
        float vi = beta2 * v[i] + (1.f - beta2) * d * d;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = w - step_size * mi / denom;
    }
}

__global__ void adadelta_step(float* p, const float* g, float* sq, float* acc, int n, float lr, float rho, float eps,
                              float weight_decay) {
    GRID_STRIDE(i, n) {
        float w = p[i], d = g[i];
        if (weight_decay != 0.f) d += weight_decay * w;
        float s = rho * sq[i] + (1.f - rho) * d * d;
        sq[i] = s;
        float delta = sqrtf(acc[i] + eps) / sqrtf(s + eps) * d;
        acc[i] = rho * acc[i] + (1.f - rho) * delta * delta;
        p[i] = w - lr * delta;
    }
}

// ---- autocast: 16-bit operands ---------------------------------------------

// y[i] = x[i] in the 16-bit format (a matrix product's operand).
__global__ void to_half(const float* x, unsigned short* y, int n, int kind) {
    GRID_STRIDE(i, n) { y[i] = to16(x[i], kind); }
}

// c[i] = beta·c[i] + round16(p[i]) (c not read when beta is 0); p may be
// c itself: a product rounded in place.
__global__ void add_rounded(float* c, const float* p, float beta, int n, int kind) {
    GRID_STRIDE(i, n) {
        float v = round16(p[i], kind);
        c[i] = beta == 0.f ? v : beta * c[i] + v;
    }
}

// Transposes between one image's planes x [c][hw] (float32, NCHW) and
// y [hw][c] (16-bit, NHWC), 32×32 tiles through shared memory so that
// both sides are read and written in whole rows. Grid (⌈hw/32⌉, ⌈c/32⌉,
// images), 256 threads: 32 columns × 8 rows, each thread 4 rows.
#define TILE 32

// y = x rounded to 16 bits, NCHW to NHWC (an input, or KCRS weights to
// KRSC with c = C and hw = R·S).
__global__ void to_half_nhwc(const float* x, unsigned short* y, int c, int hw, int kind) {
    __shared__ float tile[TILE][TILE + 1];
    int tx = threadIdx.x & (TILE - 1), ty = threadIdx.x / TILE;
    size_t base = (size_t)blockIdx.z * c * hw;
    int p0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;
    for (int j = ty; j < TILE; j += 8) {
        int ch = c0 + j, p = p0 + tx;
        if (ch < c && p < hw) tile[j][tx] = x[base + (size_t)ch * hw + p];
    }
    __syncthreads();
    for (int j = ty; j < TILE; j += 8) {
        int p = p0 + j, ch = c0 + tx;
        if (p < hw && ch < c) y[base + (size_t)p * c + ch] = to16(tile[tx][j], kind);
    }
}

// x = beta·x + widened y (+ round16(bias[ch]), rounded again, when bias is
// given), NHWC to NCHW: a product's output or gradient back to float32
// (beta 0, x not read), or a weight gradient added to its accumulator
// (beta 1).
__global__ void from_half_nhwc(const unsigned short* y, float* x, const float* bias, float beta, int c, int hw, int kind) {
    __shared__ float tile[TILE][TILE + 1];
    int tx = threadIdx.x & (TILE - 1), ty = threadIdx.x / TILE;
    size_t base = (size_t)blockIdx.z * c * hw;
    int p0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;
    for (int j = ty; j < TILE; j += 8) {
        int p = p0 + j, ch = c0 + tx;
        if (p < hw && ch < c) tile[j][tx] = from16(y[base + (size_t)p * c + ch], kind);
    }
    __syncthreads();
    for (int j = ty; j < TILE; j += 8) {
        int ch = c0 + j, p = p0 + tx;
        if (ch < c && p < hw) {
            float v = tile[tx][j];
            if (bias != 0) v = round16(v + round16(bias[ch], kind), kind);
            size_t i = base + (size_t)ch * hw + p;
            x[i] = beta == 0.f ? v : beta * x[i] + v;
        }
    }
}

}  // extern "C"
