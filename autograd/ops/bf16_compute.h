// The f32 detour that makes every differentiable op without a bf16 CPU kernel work on bf16 CPU
// tensors.
//
// The hot ops of a transformer have bf16 CPU kernels that compute in f32 between a bf16 load
// and one rounding on store (kernels/cpu/compute_type.h): add, sub, mul, sum, gelu,
// layer_norm, dropout, embedding, causal_attention, cross_entropy, and matmul/linear where the
// CPU has bf16 dot products. The others (div, the scalar and unary maps, maximum/minimum/where,
// mean, softmax) compute in f32/f64 only. For ZeRO's mixed-precision mode (bf16 parameters,
// activations and gradients; f32 master weights and Adam moments) an op whose floating inputs
// are bf16 on the CPU casts them to f32 with the differentiable `cast`, runs itself on those,
// and casts the floating result back to bf16. Autograd records the casts, so backward runs the
// f32 backward and hands bf16 gradients to the bf16 inputs. Correct, not fast: each call
// allocates f32 copies, and the op's node saves those copies rather than the bf16 inputs. So a
// bf16 parameter's f32 copy stays alive until backward (instead of backward reading the
// re-gathered parameter's storage, docs/design.md, mechanism 1): same values, more activation memory.
// Only the CPU takes this detour; CUDA ops with bf16 kernels see bf16 directly.
//
//   Tensor exp(const Tensor& a) {
//     if (bf16_on_cpu("exp", {&a})) return to_bf16(exp(to_f32(a)));
//     ...
//
// Each op keeps this to the one line at its entry (after its own dtype checks, so mixed
// bf16/f32 arguments still throw naming both dtypes).
#pragma once
#include <initializer_list>

#include "core/tensor.h"

namespace zdl::ops_detail {

// Checks the floating arguments as check_float_args does (defined, one dtype, one device),
// then says whether they are bf16 on the CPU, i.e. whether the op must take the f32 detour.
bool bf16_on_cpu(const char* op, std::initializer_list<const Tensor*> ts);
// Differentiable bf16 -> f32 cast for the detour; an undefined tensor (absent bias) passes
// through.
Tensor to_f32(const Tensor& t);
// Differentiable f32 -> bf16 cast of the detour's result.
Tensor to_bf16(const Tensor& t);

}  // namespace zdl::ops_detail
