// Model<T>: config + parameter arena + fixed G (fixed-G_LM variant) + RoPE table.
// T is the compute precision (float or double), independent of the storage dtype on disk.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/layout.h"
#include "model/packed.h"
#include "model/param_buffer.h"
#include "ops/rope.h"

namespace pldr {

template <typename T>
struct Model {
    Config cfg;
    Layout layout;
    ParamBuffer<T> params;   // layout.total elements (owned, or a file mapping: param_buffer.h)
    ModelView<T> w;          // typed pointers into params
    std::vector<T> G_fixed;  // [L,H,dk,dk]: the constant G_LM of fixed-G models (empty if learned)
    RopeTable rope;          // built by init() and set_reference_numerics()
    // Float32 inference only: bf16 / q8_0 copies of the large linear weights (model/packed.h),
    // shared by copies of the model; null when every weight is read from params.
    std::shared_ptr<const PackedWeights> packed;
    // Float32 inference only: the dense linear weights in panels (model/packed.h:
    // keep_panel_weights). A copy of the model starts without them (its parameters may change);
    // a move keeps them. Trainer::step drops them before it updates the parameters.
    std::shared_ptr<const PanelWeights> panels;
    LinearViews<T> lw;  // the linear weights as the products read them (packed or params)

    Model() = default;
    explicit Model(const Config& c) { init(c); }
    Model(const Model& o) { *this = o; }
    Model& operator=(const Model& o) {
        cfg = o.cfg;
        layout = o.layout;
        params = o.params;
        G_fixed = o.G_fixed;
        rope = o.rope;
        reference_numerics_ = o.reference_numerics_;
        w = bind_view(layout, cfg, params.data());
        packed = o.packed;
        panels.reset();
        bind_linears();
        return *this;
    }
    // Moves keep the parameter buffer (no copy: loading a model must not hold it twice).
    Model(Model&& o) { *this = std::move(o); }
    Model& operator=(Model&& o) {
        cfg = std::move(o.cfg);
        layout = std::move(o.layout);
        params = std::move(o.params);
        G_fixed = std::move(o.G_fixed);
        rope = std::move(o.rope);
        reference_numerics_ = o.reference_numerics_;
        w = bind_view(layout, cfg, params.data());
        o.w = ModelView<T>{};
        packed = std::move(o.packed);
        panels = std::move(o.panels);
        bind_linears();
        o.lw = LinearViews<T>{};
        return *this;
    }

    // Allocates zeroed parameters for `c`; fixed-G models get G = I (custom_G_type identity).
    void init(const Config& c);
    // The same over given parameters (layout.total values of make_layout(c), e.g. a mapping).
    void init(const Config& c, ParamBuffer<T> storage);
    // Emulate the reference's float32 islands inside float64 (q, k rounded to float32 before
    // RoPE, torch's float32 cos/sin table, sqrt(float32(dk)) and sqrt(float32(d))). On by
    // default: it is what golden parity needs. Off gives a pure-float64 audit with the correctly
    // rounded RoPE table. For T = float it selects the RoPE table (and the DAG mode) only.
    void set_reference_numerics(bool on);
    bool reference_numerics() const { return reference_numerics_; }
    bool round_f32() const { return reference_numerics_ && sizeof(T) == sizeof(double); }
    T embed_scale() const;  // sqrt(d)
    T score_scale() const;  // sqrt(dk)
    const T* G_fixed_layer(int64_t l) const {
        return G_fixed.data() + l * cfg.num_heads * cfg.head_dim * cfg.head_dim;
    }
    int64_t num_params() const { return layout.total; }
    // Rebuilds lw from packed and params (after either changed).
    void bind_linears();

  private:
    bool reference_numerics_ = true;
    void build_rope();
};

// Packs every packable weight of m (model/packed.h) as `f` (BF16 or Q8_0) and replaces its values
// in params by the dequantized ones. Throws pldr::Error for a non-finite weight.
void pack_model(Model<float>& m, WeightFormat f);
// Drops the packed weights: every product reads params again (the same values).
template <typename T>
void unpack_model(Model<T>& m);
// Keeps the dense float32 linear weights in panels (ops/linear.h; model/packed.h: PanelWeights) for
// float32 inference: the q, k, v and output projections, the FFN's three weights and the head,
// the weights packed as bf16 / q8_0 excepted. All of them, where the CPU runs products over
// panels (panels_available) and they take at most max_bytes or the parameters are a file
// mapping (whose weight pages then go back to the page cache, those a write has copied excepted),
// or none. The parameters must not change while the panels are kept (drop_panel_weights).
void keep_panel_weights(Model<float>& m, int64_t max_bytes = kPanelMaxBytes);
template <typename T>
void drop_panel_weights(Model<T>& m);

}  // namespace pldr
