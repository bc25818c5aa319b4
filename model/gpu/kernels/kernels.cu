// Kernels of gorun's GPU backend (package model/gpu). Each matches the
// arithmetic of the CPU backend (package model/cpu) up to summation order.
// `go generate ./model/gpu` compiles this file to kernels.ptx for the
// oldest architecture CUDA 13 supports, which newer GPUs JIT-compile at
// load; the PTX is committed so building gorun needs no CUDA toolkit.

// Indices are 32-bit: the backend refuses tensors of 2^31 elements or
// more, and 64-bit division costs a GPU several times as much.
#define GRID_STRIDE(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

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
__global__ void channel_partials(const float* dy, double* partial, int n, int c, int hw) {
    extern __shared__ double sh[];
    int ch = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
    int total = n * hw;
    int per = (total + parts - 1) / parts;
    int lo = part * per, hi = min(total, lo + per);
    double s = 0;
    for (int k = lo + threadIdx.x; k < hi; k += blockDim.x) s += dy[((k / hw) * c + ch) * hw + k % hw];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[ch * parts + part] = s;
}

// db[ch] += Σ_part partial[ch·parts + part].
__global__ void sum_partials(const double* partial, float* db, int c, int parts) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double s = 0;
    for (int p = 0; p < parts; p++) s += partial[ch * parts + p];
    db[ch] += (float)s;
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

// partial[ch·parts + part] = Σ x over block (ch, part)'s share.
__global__ void bn_sum_parts(const float* x, double* partial, int n, int c, int hw) {
    extern __shared__ double sh[];
    double s = 0;
    CHANNEL_SHARE(i, n, c, hw, s += x[i]);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x * gridDim.y + blockIdx.y] = s;
}

// partial[ch·parts + part] = Σ (x − sums[ch]/count)² over the share.
__global__ void bn_sqdev_parts(const float* x, const double* sums, double count, double* partial, int n, int c, int hw) {
    extern __shared__ double sh[];
    double mean = sums[blockIdx.x] / count, s = 0;
    CHANNEL_SHARE(i, n, c, hw, { double d = (double)x[i] - mean; s += d * d; });
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

__global__ void bn_apply(const float* x, float* y, const float* gamma, const float* beta, const float* mean,
                         const float* invstd, int total, int c, int hw) {
    GRID_STRIDE(i, total) {
        int ch = (i / hw) % c;
        float scale = invstd[ch] * gamma[ch];
        float shift = beta[ch] - mean[ch] * scale;
        y[i] = x[i] * scale + shift;
    }
}

// partial[2(ch·parts + part)] = Σdy and [… + 1] = Σdy·x̂ over the share.
__global__ void bn_backward_parts(const float* x, const float* dy, const float* mean, const float* invstd,
                                  double* partial, int n, int c, int hw) {
    extern __shared__ double sh[];
    double m = mean[blockIdx.x], is = invstd[blockIdx.x], sdy = 0, sdx = 0;
    CHANNEL_SHARE(i, n, c, hw, {
        double g = dy[i];
        sdy += g;
        sdx += g * ((double)x[i] - m) * is;
    });
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

__global__ void bn_backward_dx(const float* x, const float* dy, float* dx, const float* gamma, const float* mean,
                               const float* invstd, const double* sums, double count, int training, int total, int c, int hw) {
    GRID_STRIDE(i, total) {
        int ch = (i / hw) % c;
        double is = invstd[ch], g = gamma[ch];
        if (!training) {
            dx[i] = dy[i] * (float)(g * is);
            continue;
        }
        double xhat = ((double)x[i] - (double)mean[ch]) * is;
        double k = g * is / count;
        dx[i] = (float)(k * (count * (double)dy[i] - sums[2 * ch] - xhat * sums[2 * ch + 1]));
    }
}

// ---- element-wise ---------------------------------------------------------------

__global__ void relu(const float* x, float* y, int n) {
    GRID_STRIDE(i, n) { float v = x[i]; y[i] = v > 0.f ? v : (v != v ? v : 0.f); }
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

}  // extern "C"
