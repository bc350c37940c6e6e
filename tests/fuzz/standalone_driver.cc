// A main() for fuzz targets when libFuzzer is not linked: runs every file of
// the corpus directories given as arguments through LLVMFuzzerTestOneInput,
// then mutates them at random (seeded, so a run is repeatable) until
// --seconds have passed. It finds what a crash, an ASan/UBSan report or an
// abort finds; coverage guidance needs the libFuzzer build
// (`--config=fuzz`, see tests/fuzz/BUILD).
//
// On a fatal signal the input being run is written to
// $TEST_UNDECLARED_OUTPUTS_DIR/crash-input (or ./crash-input) so it can be
// added to the corpus as a regression case.

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

const std::vector<uint8_t>* current_input = nullptr;
char crash_path[4096];

void OnFatalSignal(int sig) {
  if (current_input != nullptr) {
    const int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      const uint8_t* p = current_input->data();
      size_t left = current_input->size();
      while (left > 0) {
        const ssize_t n = write(fd, p, left);
        if (n <= 0) break;
        p += n;
        left -= static_cast<size_t>(n);
      }
      close(fd);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::vector<uint8_t>& input) {
  current_input = &input;
  LLVMFuzzerTestOneInput(input.data(), input.size());
  current_input = nullptr;
}

std::vector<std::vector<uint8_t>> ReadCorpus(const std::string& dir) {
  std::vector<std::vector<uint8_t>> corpus;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    std::fprintf(stderr, "cannot open corpus directory %s\n", dir.c_str());
    std::exit(2);
  }
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in),
                        std::istreambuf_iterator<char>());
  }
  closedir(d);
  return corpus;
}

// One random edit: flip a bit, set a byte to an interesting value, insert or
// erase bytes, copy a run from another input, or overwrite a little-endian
// integer with a boundary value (sizes and counts are where parsers break).
void Mutate(std::vector<uint8_t>& in,
            const std::vector<std::vector<uint8_t>>& corpus,
            std::mt19937_64& rng, size_t max_size) {
  auto pick = [&](size_t n) { return n == 0 ? 0 : rng() % n; };
  static constexpr uint8_t kBytes[] = {0, 1, 0x7f, 0x80, 0xff, 0x10, 0x40};
  static constexpr uint64_t kInts[] = {0,          1,         0x7fffffff,
                                       0x80000000, 0xffffffff, 1ull << 32,
                                       ~0ull,      1ull << 62, 4096};
  switch (rng() % 6) {
    case 0:
      if (!in.empty()) in[pick(in.size())] ^= uint8_t(1u << (rng() % 8));
      break;
    case 1:
      if (!in.empty()) in[pick(in.size())] = kBytes[pick(std::size(kBytes))];
      break;
    case 2:
      if (in.size() < max_size) {
        in.insert(in.begin() + pick(in.size() + 1), 1 + pick(8),
                  uint8_t(rng()));
      }
      break;
    case 3:
      if (!in.empty()) {
        const size_t at = pick(in.size());
        in.erase(in.begin() + at,
                 in.begin() + at + std::min(in.size() - at, 1 + pick(16)));
      }
      break;
    case 4: {
      const auto& other = corpus[pick(corpus.size())];
      if (other.empty() || in.empty()) break;
      const size_t from = pick(other.size());
      const size_t n = std::min(other.size() - from, 1 + pick(64));
      const size_t to = pick(in.size());
      for (size_t i = 0; i < n && to + i < in.size(); ++i) {
        in[to + i] = other[from + i];
      }
      break;
    }
    default: {
      const int width = 1 << (rng() % 4);  // 1, 2, 4 or 8 bytes
      if (in.size() < size_t(width)) break;
      const uint64_t v = kInts[pick(std::size(kInts))];
      std::memcpy(&in[pick(in.size() - width + 1)], &v, width);
      break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  uint64_t seed = 1;
  size_t max_size = 1 << 16;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--seconds=", 0) == 0) {
      seconds = std::atof(arg.c_str() + 10);
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 7, nullptr, 10);
    } else if (arg.rfind("--max_size=", 0) == 0) {
      max_size = std::strtoull(arg.c_str() + 11, nullptr, 10);
    } else {
      dirs.push_back(arg);
    }
  }
  const char* out_dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  std::snprintf(crash_path, sizeof(crash_path), "%s/crash-input",
                out_dir != nullptr ? out_dir : ".");
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) {
    signal(sig, OnFatalSignal);
  }

  std::vector<std::vector<uint8_t>> corpus;
  for (const auto& dir : dirs) {
    for (auto& input : ReadCorpus(dir)) corpus.push_back(std::move(input));
  }
  if (corpus.empty()) corpus.emplace_back();
  for (const auto& input : corpus) Run(input);

  std::mt19937_64 rng(seed);
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration<double>(seconds);
  uint64_t runs = corpus.size();
  std::vector<uint8_t> input;
  while (std::chrono::steady_clock::now() < end) {
    input = corpus[rng() % corpus.size()];
    const int edits = 1 + int(rng() % 8);
    for (int e = 0; e < edits; ++e) Mutate(input, corpus, rng, max_size);
    Run(input);
    ++runs;
  }
  std::fprintf(stderr, "%llu inputs (%zu from the corpus), no failure\n",
               static_cast<unsigned long long>(runs), corpus.size());
  return 0;
}
