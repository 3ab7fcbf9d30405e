// Backward pass (see backward.h): the head, the decoder layers in reverse
// (decoder_layer_backward, beside the forward in model/plga_layer.cpp), the input LayerNorm and
// the embedding. docs/plga.md derives each rule.
#include "model/backward.h"

#include <algorithm>

#include "core/alloc.h"
#include "core/zero.h"
#include "model/plga_layer.h"
#include "ops/layernorm.h"
#include "ops/linear.h"

namespace pldr {

template <typename T>
void require_float_weights(const Model<T>& m) {
    // Training and gradients need the float weights (the products would otherwise differentiate
    // the packed copies while the optimizer updated the parameters).
    PLDR_REQUIRE(!m.packed,
                 "gradients and training need float weights, but this model holds its "
                 "linear weights packed as ",
                 weight_format_name(m.packed->format()),
                 " for inference; load it dequantized (LoadOptions::dequantize, pldr "
                 "--dequantize) or convert it with pldr convert --dtype f32");
}

template <typename T>
void backward(const Model<T>& m, const Activations<T>& a, const Tensor<T>& dlogits,
              const std::vector<DeductiveGrads<T>>* extra, T* grads) {
    const Config& c = m.cfg;
    const int64_t d = c.hidden_size, N = a.B * a.S, V = c.vocab_size;
    ModelView<T> g = bind_view(m.layout, c, grads);
    Tensor<T> dx = zeros_on_team<T>({a.B, a.S, d});
    linear_backward(dx.ptr(), g.head_w, g.head_b, dlogits.ptr(), a.final_hidden().ptr(), m.w.head_w,
                    N, d, V);
    backward_below_head(m, a, dx, extra, grads);
}

template <typename T>
void backward_below_head(const Model<T>& m, const Activations<T>& a, Tensor<T>& dhidden,
                         const std::vector<DeductiveGrads<T>>* extra, T* grads,
                         Activations<T>* consume) {
    const Config& c = m.cfg;
    require_float_weights(m);
    const int64_t d = c.hidden_size, N = a.B * a.S;
    ModelView<T> g = bind_view(m.layout, c, grads);
    Tensor<T> dx = std::move(dhidden);
    // Handing freed memory back pays where a layer's activations are large (core/alloc.h): the
    // bulk of them, [N,d] and [N,F] tensors. With the page cache on, those tensors' pages move
    // into the gradients instead, and trimming the heap (what is left there is small) only made
    // it fault again: 70,000 faults per 110M step, the same peak with or without.
    const bool give_back =
        consume && !page_cache_enabled() &&
        double(N) * double(6 * d + 2 * c.intermediate_size) * sizeof(T) >= double(kReturnBytes);
    if (give_back) release_free_memory();  // what the forward and the head have freed
    // A gradient buffer from map_zero_pages (the training step's) takes each layer's pages from
    // the page cache, where the activations freed so far went, rather than faulting them in
    // (core/alloc.h; for any other buffer this does nothing).
    auto fill = [&](T* p, int64_t n) {
        if (consume && p) fill_zero_pages(p, size_t(n) * sizeof(T));
    };
    for (int64_t l = c.num_layers - 1; l >= 0; --l) {
        fill(grads + m.layout.layer_begin[size_t(l)],
             m.layout.layer_begin[size_t(l) + 1] - m.layout.layer_begin[size_t(l)]);
        Tensor<T> dx_in;
        decoder_layer_backward(m, l, a, extra ? &(*extra)[size_t(l)] : nullptr, dx, g, dx_in,
                               consume ? &consume->layers[size_t(l)] : nullptr);
        dx = std::move(dx_in);
        if (consume) {
            consume->layers[size_t(l)] = LayerActs<T>();
            if (give_back) release_free_memory();  // before the next layer's gradients
        }
    }
    // x0 = embedding · sqrt(d), LN_in's input (a training forward keeps none: the same bits again)
    Tensor<T> x0_again, ln_again, mean_again, rstd_again;
    if (!a.x0.numel())
        embed_forward(m, a.ids.data(), N, x0_again, ln_again, mean_again, rstd_again);
    const T* x0 = a.x0.numel() ? a.x0.ptr() : x0_again.ptr();
    Tensor<T> dx0 = zeros_on_team<T>({a.B, a.S, d});
    fill(g.emb, c.vocab_size * d);
    layernorm_backward(dx0.ptr(), g.ln_in_g, g.ln_in_b, dx.ptr(), x0, a.ln_mean.ptr(),
                       a.ln_rstd.ptr(), m.w.ln_in_g, N, d);
    const T scale = m.embed_scale();
    for (int64_t n = 0; n < N; ++n) {
        T* e = g.emb + a.ids[size_t(n)] * d;
        for (int64_t j = 0; j < d; ++j) e[j] += dx0[n * d + j] * scale;
    }
}

template void require_float_weights<float>(const Model<float>&);
template void require_float_weights<double>(const Model<double>&);
template void backward<float>(const Model<float>&, const Activations<float>&, const Tensor<float>&,
                              const std::vector<DeductiveGrads<float>>*, float*);
template void backward<double>(const Model<double>&, const Activations<double>&,
                               const Tensor<double>&, const std::vector<DeductiveGrads<double>>*,
                               double*);
template void backward_below_head<float>(const Model<float>&, const Activations<float>&,
                                         Tensor<float>&, const std::vector<DeductiveGrads<float>>*,
                                         float*, Activations<float>*);
template void backward_below_head<double>(const Model<double>&, const Activations<double>&,
                                          Tensor<double>&,
                                          const std::vector<DeductiveGrads<double>>*, double*,
                                          Activations<double>*);

}  // namespace pldr
