// A run's record of the data it trains on, kept in its checkpoints' metadata, so that a resumed
// run can refuse data that changed since, naming the file that did:
//   "data"              JSON: the source as given, the format, and each file's absolute path,
//                       tokens and fingerprint, in reading order (data_record)
//   "data_fingerprint"  the fingerprint of all the files together (DataFingerprint::to_string)
// A checkpoint from before token shards holds only "data_fingerprint", of its one file.
//
//   st.metadata[data::kDataRecordKey] = data::data_record(files, fps);
//   data::check_sizes_match_record(st.metadata, files, "the data");   // before reading a byte
//   data::check_bytes_match_record(st.metadata, files, fps, "the data");
#pragma once
#include <map>
#include <string>
#include <vector>

#include "data/data_fingerprint.h"
#include "data/token_files.h"

namespace zdl::data {

using Metadata = std::map<std::string, std::string>;
inline constexpr const char* kDataRecordKey = "data";
inline constexpr const char* kDataFingerprintKey = "data_fingerprint";

// The "data" record of `files`, whose fingerprints (file_fingerprints()) are `fps`.
std::string data_record(const TokenFiles& files, const std::vector<DataFingerprint>& fps);

// The fingerprints of the files a checkpoint was trained on, in reading order: from its "data"
// record, or its one file's; none if it has neither. Throws zdl::Error if the record is unreadable.
std::vector<DataFingerprint> recorded_file_fingerprints(const Metadata& metadata);

// The format the record's data had ("bytes", "llm.c"); "" when the record has none.
std::string recorded_format(const Metadata& metadata);

// Data of another size than the record's, said plainly (another number of files, a file shorter
// or longer; a file at another path than the record's is named as another file, not a changed
// one), before anything reads them. Throws zdl::Error; `named` is the source as the user
// gave it (e.g. "--data 'input.txt'").
void check_sizes_match_record(const Metadata& metadata, const TokenFiles& files, const std::string& named);

// Data whose fingerprint differs from the record's: throws zdl::Error naming the first file that
// differs (or the source, `named`, when the record holds no file's).
void check_bytes_match_record(const Metadata& metadata, const TokenFiles& files,
                              const std::vector<DataFingerprint>& fps, const std::string& named);

}  // namespace zdl::data
