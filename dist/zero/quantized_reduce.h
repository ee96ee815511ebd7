// ZeRO++'s qgZ: a reduce-scatter of gradients moved as int8 codes, in two hops, so that only
// 1/R of the gradient crosses nodes (ZeroOptions::quantize_grads, docs/multinode.md).
//
// The K ranks of a shard group sit on M nodes of R ranks (group rank r = n R + l: node n, node
// rank l). Rank r ends with block r of the sum, S elements. Two all-to-alls of int8 records
// (kernels/cpu/quantize.h, one record of W = quantized_record_words(S) int32 words per block):
//   1. within the node: rank (n, l) sends peer l' its M blocks owned by (n', l') for every node n',
//      and sums, in f32, the R records it receives for its own node rank: the node's partial sums
//      of the M blocks (n', l);
//   2. across nodes, among the ranks with node rank l: rank (n, l) sends node n' its partial of
//      block (n', l) and sums the M partials it receives: block r of the whole group's sum.
// Each hop quantizes what it sends, so the result differs from the exact sum by design. Sums run
// in a fixed order (peers, then nodes, in rank order): the same bits every run.
//
// Bytes per rank and unit: hop 1 sends 4 K W (R-1)/R within the node; hop 2 sends 4 M W (M-1)/M
// = 4 W (M-1) across nodes, about s Psi_u / R x 1/s of the plain reduce-scatter's s Psi_u.
#pragma once
#include <memory>

#include "dist/comm/communicator.h"

namespace zdl::dist {

// input: the unit's full gradients (K S elements, f32 or bf16, CPU); output: this rank's block
// (S elements). `node`: the group's ranks on this node (size R, rank l); `across`: the group's
// ranks with this node rank (size M, rank n). The input is quantized and hop 1 issued now; wait()
// finishes it, runs hop 2 and writes the output, which must stay alive until then.
std::shared_ptr<Work> quantized_reduce_scatter_async(Communicator& node, Communicator& across, const Tensor& input,
                                                     const Tensor& output);

}  // namespace zdl::dist
