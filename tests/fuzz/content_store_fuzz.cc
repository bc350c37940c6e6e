// Fuzzes the content store's file reader (server/sessions/content_store.h):
// a cache file of --cache_dir is damaged into the fuzz input, then a new
// store looks its hash up. Whatever the file holds, the store returns either
// nothing or exactly the bytes that were stored under that hash.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "proto/content_hash.h"
#include "server/sessions/content_store.h"
#include "tests/fuzz/quiet.h"

namespace {

namespace fs = std::filesystem;

void Check(bool condition) {
  if (!condition) std::abort();
}

std::string Content() {
  std::string s(tessera::server::ContentStore::kMinBytes + 100, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 31 + 7);
  return s;
}

// A directory holding one cache file; the path of that file.
struct World {
  World() {
    tessera::fuzz::Quiet();
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string tmpl = std::string(tmp != nullptr ? tmp : "/tmp") +
                       "/tessera_content_fuzz_XXXXXX";
    Check(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    content = std::make_shared<const std::string>(Content());
    hash = tessera::wire::HashContent(content->data(), content->size(), 2);
    tessera::server::ContentStore(0, dir).Put(hash, content);
    for (const auto& entry : fs::directory_iterator(dir)) file = entry.path();
    Check(!file.empty());
    std::ifstream in(file, std::ios::binary);
    original.assign(std::istreambuf_iterator<char>(in),
                    std::istreambuf_iterator<char>());
  }
  std::string dir;
  std::string file;
  std::string original;  // the file as the store wrote it
  std::shared_ptr<const std::string> content;
  tessera::wire::ContentHash hash;
};

}  // namespace

// The input edits the original file: its first 8 bytes give the length to
// keep, the rest overwrite the file from its start.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World();
  std::string damaged = world->original;
  if (size >= 8) {
    uint64_t keep = 0;
    for (int i = 0; i < 8; ++i) keep |= uint64_t{data[i]} << (8 * i);
    damaged.resize(keep % (damaged.size() + 64), '\0');
    data += 8;
    size -= 8;
  }
  for (size_t i = 0; i < size && i < damaged.size(); ++i) {
    damaged[i] = static_cast<char>(data[i]);
  }
  {
    std::ofstream out(world->file, std::ios::binary | std::ios::trunc);
    out.write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
  }
  tessera::server::ContentStore store(0, world->dir);
  auto found = store.Find(world->hash, world->content->size());
  Check(found == nullptr || *found == *world->content);
  return 0;
}
