#include "server/ggml_rpc/content_cache.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/ggml_rpc/protocol.h"
#include "spdlog/spdlog.h"

namespace tessera::server::ggml_rpc {
namespace {

// Files are read in pieces of this size.
constexpr size_t kPieceBytes = size_t{8} << 20;

}  // namespace

std::string ContentCache::PathOf(uint64_t hash) const {
  return absl::StrCat(dir_, "/", absl::StrFormat("%016x", hash));
}

// The bytes go to a temporary file while they are hashed; the file is
// then renamed to the hash.
void ContentCache::Put(const BufferRange& src) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const std::string tmp =
      absl::StrCat(dir_, "/.incoming-", absl::Hex(reinterpret_cast<uintptr_t>(&src)));
  std::vector<uint8_t> piece(std::min(kPieceBytes, src.size));
  uint64_t hash = tessera::ggml_rpc::kFnvOffsetBasis;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    for (size_t at = 0; at < src.size && out.good();) {
      const size_t n = std::min(piece.size(), src.size - at);
      if (absl::Status s = src.buffer->Read(src.offset + at, piece.data(), n);
          !s.ok()) {
        spdlog::warn("[ggml-rpc cache] cannot read the upload: {}",
                     std::string(s.message()));
        out.setstate(std::ios::failbit);
        break;
      }
      hash = tessera::ggml_rpc::Fnv1a64(hash, absl::MakeConstSpan(piece.data(), n));
      out.write(reinterpret_cast<const char*>(piece.data()),
                static_cast<std::streamsize>(n));
      at += n;
    }
    if (!out.good()) {
      spdlog::warn("[ggml-rpc cache] cannot write {}", tmp);
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  const std::string path = PathOf(hash);
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    spdlog::warn("[ggml-rpc cache] cannot rename {}: {}", tmp, ec.message());
    std::filesystem::remove(tmp, ec);
  }
}

// 1. Find the file and check its size against the destination.
// 2. Hash it piece by piece; a mismatch removes it.
// 3. Read it again into the destination.
absl::StatusOr<std::optional<size_t>> ContentCache::Place(
    uint64_t hash, const BufferRange& dst) {
  const std::string path = PathOf(hash);
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return std::optional<size_t>();
  if (size > dst.size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cached content of ", size, " bytes does not fit the ", dst.size,
        " bytes from the tensor's address to its buffer's end"));
  }
  std::vector<uint8_t> piece(std::min<size_t>(kPieceBytes, size));
  std::ifstream in(path, std::ios::binary);
  uint64_t h = tessera::ggml_rpc::kFnvOffsetBasis;
  for (size_t at = 0; at < size;) {
    const size_t n = std::min<size_t>(piece.size(), size - at);
    if (!in.read(reinterpret_cast<char*>(piece.data()), n)) break;
    h = tessera::ggml_rpc::Fnv1a64(h, absl::MakeConstSpan(piece.data(), n));
    at += n;
  }
  if (!in.good() || h != hash) {
    spdlog::warn("[ggml-rpc cache] {} does not hash to its name; removed",
                 path);
    std::filesystem::remove(path, ec);
    return std::optional<size_t>();
  }
  in.seekg(0);
  for (size_t at = 0; at < size;) {
    const size_t n = std::min<size_t>(piece.size(), size - at);
    if (!in.read(reinterpret_cast<char*>(piece.data()), n)) {
      return absl::DataLossError(absl::StrCat("cannot read ", path));
    }
    if (absl::Status s = dst.buffer->Write(dst.offset + at, piece.data(), n);
        !s.ok()) {
      return s;
    }
    at += n;
  }
  return std::optional<size_t>(size);
}

}  // namespace tessera::server::ggml_rpc
