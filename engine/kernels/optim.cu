// The engine's optimizer updates on the GPU, one fused pass per parameter tensor, with the arithmetic
// of `Optimizer::step` on the host (src/optim.rs) and of the host versions of these ops (src/fused.rs);
// and the count of a batch's correct predictions.
// Compiled to PTX by build.rs when the `cuda` feature is on.

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)blockDim.x * gridDim.x)

// AdamW in one pass over a parameter: both moments (mv: m, then v) and the parameter itself.
extern "C" __global__ void adamw_step(size_t n, float beta1, float beta2, float decay, float step_size,
                                      float sqrt_c2, float eps, float *p, float *mv, const float *g) {
    GRID_STRIDE(i, n) {
        float gi = g[i];
        float m = beta1 * mv[i] + (1.0f - beta1) * gi;
        float v = beta2 * mv[n + i] + (1.0f - beta2) * gi * gi;
        mv[i] = m;
        mv[n + i] = v;
        float pi = p[i] * decay;
        p[i] = pi - step_size * m / (sqrtf(v) / sqrt_c2 + eps);
    }
}

// SGD in one pass over a parameter: the momentum buffer (modes 1 and 2) and the parameter.
extern "C" __global__ void sgd_step(size_t n, int first, int mode, float lr, float momentum, float wd,
                                    float *p, float *buf, const float *g) {
    GRID_STRIDE(i, n) {
        float d = g[i] + wd * p[i];
        float update = d;
        if (mode != 0) {
            float b = first ? d : momentum * buf[i] + d;
            buf[i] = b;
            update = mode == 2 ? d + momentum * b : b;
        }
        p[i] -= lr * update;
    }
}

// A batch's correct predictions added to a running count: the rows of logits [rows, classes] whose
// largest value (the first, on ties) is at the row's target.
extern "C" __global__ void add_correct(size_t rows, size_t classes, float *total, const float *logits,
                                       const unsigned int *targets) {
    GRID_STRIDE(row, rows) {
        const float *z = logits + row * classes;
        size_t best = 0;
        for (size_t c = 1; c < classes; ++c) {
            if (z[c] > z[best]) {
                best = c;
            }
        }
        if (best == targets[row]) {
            atomicAdd(total, 1.0f);
        }
    }
}
