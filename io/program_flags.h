// A program's flags as CLI11 parsed them, checked beyond what CLI11 checks: numbers it lets
// through malformed, its range messages made short, and the same flags on every rank.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"

namespace zdl::io {

// How a program starts: CLI11's verdict on argv, the numbers it lets through (malformed_number),
// then the environment variables zerodl reads (io/environment.h). Returns an exit code to return
// (0 after --help; 2 after "NAME: MESSAGE (see --help)" or "NAME: MESSAGE" on stderr), or none
// to go on.
std::optional<int> check_invocation(const char* name, CLI::App& app, int argc, char** argv);

// Numbers CLI11 (2.1) lets through although they are malformed: nan passes every range check
// (each comparison is false), an integer too large for 64 bits is clamped to the largest one,
// and "-1" wraps around in an unsigned option. Returns the complaint, or "" if all are fine.
std::string malformed_number(const CLI::App& app);

// A count of bytes as a user writes it: "1048576", "512K", "2G", "1.5GiB", "64MB" (units B, K, M,
// G, T, each with or without "B" or "iB", any case, all 1024-based; a fraction is rounded down to
// whole bytes). Returns the count, or nullopt and `why` ("... is not a size in bytes ...").
std::optional<int64_t> parse_byte_size(const std::string& text, std::string* why);

// The CLI11 transform of parse_byte_size: an option given as a size becomes its count of bytes.
CLI::Validator ByteSize();

// CLI11's range message for PositiveNumber / NonNegativeNumber prints DBL_MAX in full (309
// digits): "Value 0 not in range 0.000000 to 17976931348...". Said briefly instead.
std::string short_parse_message(std::string m);

// [Note: ranks that disagree] Every rank of a job must run with the same flags: ranks with
// another --n-embd, --lr or --seed would train (or stitch checkpoints from) different models and
// still exit 0. So before anything else the ranks compare their flags: one all_gather of a hash
// of all of them; on a difference, one more per flag to find the first that differs and the
// first rank that has another value, whose value rank 0 receives to name both. Paths
// (`path_flags`) may differ between hosts: only whether they are given must agree (their files'
// contents are compared where they are read, e.g. the data's fingerprint). Throws UsageError.
void agree_on_flags(dist::Communicator& comm, const CLI::App& app, const std::vector<std::string>& path_flags);

}  // namespace zdl::io
