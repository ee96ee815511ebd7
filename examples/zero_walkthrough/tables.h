// The walkthrough's tables [1], [2], [3] and [5]: each measurement next to its closed form from
// dist/zero/closed_forms.h, checked (a difference is a failure in the report), and written as a CSV.
#pragma once
#include <span>

#include "examples/zero_walkthrough/args.h"
#include "examples/zero_walkthrough/report.h"
#include "examples/zero_walkthrough/stage_run.h"

namespace zdl::walkthrough {

// Psi, the padded P and the element bytes s, K of every closed form: checks Psi against GPT-2's parameter count.
void print_sizes(Report& rep, const Args& a, const StageRun& r);

// [1] Memory per rank by category, after a step and at its peak: checks dist::model_state_bytes and
// dist::step_peaks_closed_form.
void print_memory_table(Report& rep, std::span<const StageRun> stages);

// [2] Bytes per rank per step by collective and phase: checks dist::traffic_closed_form, and no collective beyond it.
void print_traffic_table(Report& rep, std::span<const StageRun> stages);

// [3] Step time and losses, ZeRO-3 with and without prefetch: checks every run's losses equal DDP's (up to --loss-tol).
void print_step_table(Report& rep, const Args& a, std::span<const StageRun> runs);

// The traced step of every run, event by event with this rank's memory (the pictures' data): CSV only, no check.
void write_trace_csv(const Report& rep, std::span<const StageRun> runs);

// [5] Every block checkpointed, per stage, next to the same stage without: identical losses and
// traffic (under ZeRO-3 the recompute runs inside the backward gather window), the activations
// the forward keeps smaller by dist::checkpointing_saved_bytes (f32), the activation peak, and the step's cost.
void print_checkpoint_table(Report& rep, const Args& a, std::span<const StageRun> plain, std::span<const StageRun> ckpt);

}  // namespace zdl::walkthrough
