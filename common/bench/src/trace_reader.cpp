// Reads xz-compressed allocation traces (trace_reader.h) with liblzma, streaming: the compressed
// file is read in 64 KiB pieces and decoded records go straight into the per-thread arrays.
#include "tierpool_bench/trace_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <lzma.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "trace_format.h"

namespace tierpool::bench {
namespace {

// liblzma's buffers from mmap too (a header keeps the length for munmap).
void* LzmaAlloc(void*, std::size_t count, std::size_t size) {
  const std::size_t bytes = count * size + 16;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  *static_cast<std::size_t*>(p) = bytes;
  return static_cast<char*>(p) + 16;
}
void LzmaFree(void*, void* p) {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - 16;
  munmap(base, *reinterpret_cast<std::size_t*>(base));
}

// The decompressed bytes of a file, handed out one at a time.
class XzReader {
 public:
  explicit XzReader(const std::string& path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    allocator_ = lzma_allocator{LzmaAlloc, LzmaFree, nullptr};
    stream_.allocator = &allocator_;
    ok_ = fd_ >= 0 && lzma_stream_decoder(&stream_, UINT64_MAX, 0) == LZMA_OK;
    in_ = MappedVector<std::uint8_t>(kChunk);
    out_ = MappedVector<std::uint8_t>(kChunk);
  }
  ~XzReader() {
    lzma_end(&stream_);
    if (fd_ >= 0) close(fd_);
  }
  XzReader(const XzReader&) = delete;
  XzReader& operator=(const XzReader&) = delete;

  bool ok() const { return ok_; }
  // The next byte; false at the end of the data or on an error (then failed() is true).
  bool Byte(std::uint8_t& b) {
    if (pos_ == len_ && !Refill()) return false;
    b = out_[pos_++];
    return true;
  }
  bool Varint(std::uint64_t& v) {
    v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      std::uint8_t b;
      if (!Byte(b)) return false;
      v |= std::uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    failed_ = true;
    return false;
  }
  bool failed() const { return failed_; }

 private:
  static constexpr std::size_t kChunk = 64 * 1024;

  bool Refill() {
    while (!done_) {
      if (stream_.avail_in == 0) {
        const ssize_t n = read(fd_, in_.data(), kChunk);
        if (n < 0) {
          failed_ = true;
          return false;
        }
        stream_.next_in = in_.data();
        stream_.avail_in = std::size_t(n);
      }
      stream_.next_out = out_.data();
      stream_.avail_out = kChunk;
      const lzma_ret ret = lzma_code(&stream_, stream_.avail_in == 0 ? LZMA_FINISH : LZMA_RUN);
      len_ = kChunk - stream_.avail_out;
      pos_ = 0;
      if (ret == LZMA_STREAM_END) done_ = true;
      if (ret != LZMA_OK && ret != LZMA_STREAM_END) {
        failed_ = true;
        return false;
      }
      if (len_ > 0) return true;
    }
    return false;
  }

  int fd_;
  bool ok_ = false;
  bool done_ = false;
  bool failed_ = false;
  lzma_allocator allocator_{};
  lzma_stream stream_ = LZMA_STREAM_INIT;
  MappedVector<std::uint8_t> in_;
  MappedVector<std::uint8_t> out_;
  std::size_t pos_ = 0;
  std::size_t len_ = 0;
};

constexpr std::uint64_t kPointGranule = 256;  // the live-bytes history is kept every 256 ops
constexpr std::uint64_t kPoints = 200;        // about this many samples over a whole trace

}  // namespace

bool LoadTrace(const std::string& path, std::uint64_t op_limit, Trace& trace, std::string& error) {
  trace = Trace{};
  XzReader in(path);
  if (!in.ok()) {
    error = "cannot open " + path;
    return false;
  }
  char magic[TP_TRACE_MAGIC_BYTES];
  for (char& c : magic) {
    std::uint8_t b;
    if (!in.Byte(b)) break;
    c = char(b);
  }
  std::uint64_t length = 0;
  if (std::memcmp(magic, TP_TRACE_MAGIC, TP_TRACE_MAGIC_BYTES) != 0 || !in.Varint(length) ||
      length > 4096) {
    error = path + " is not an xz-compressed allocation trace";
    return false;
  }
  for (std::uint64_t i = 0; i < length; ++i) {
    std::uint8_t b;
    if (!in.Byte(b)) break;
    trace.command.push_back(char(b));
  }

  MappedVector<std::uint16_t> owner;    // by id: the thread that allocated it
  MappedVector<std::uint64_t> history;  // live bytes after every kPointGranule ops
  MappedVector<std::uint64_t> history_ms;
  std::uint64_t live = 0;
  std::uint64_t ms = 0;
  unsigned thread = 0;
  auto corrupt = [&](const char* what) {
    error = path + ": " + what;
    return false;
  };
  auto push = [&](TraceOp op) {
    op.seq = std::uint32_t(trace.ops);
    if (trace.per_thread.size() <= thread) trace.per_thread.resize(thread + 1);
    trace.per_thread[thread].push_back(op);
    ++trace.ops;
    trace.peak_live_bytes = std::max(trace.peak_live_bytes, live);
    if (trace.ops % kPointGranule == 0) {
      history.push_back(live);
      history_ms.push_back(ms);
    }
  };
  auto new_block = [&](std::uint64_t size) -> std::uint32_t {
    trace.block_size.push_back(size);
    owner.push_back(std::uint16_t(thread));
    trace.max_size = std::max(trace.max_size, size);
    live += size;
    return std::uint32_t(trace.block_size.size() - 1);
  };
  // A block named by a freeing record: `back` before the next id.
  auto old_block = [&](std::uint64_t back, std::uint32_t& id) {
    if (back == 0 || back > trace.block_size.size()) return false;
    id = std::uint32_t(trace.block_size.size() - back);
    return true;
  };

  while (op_limit == 0 || trace.ops < op_limit) {
    std::uint8_t code;
    if (!in.Byte(code)) break;
    std::uint64_t a = 0;
    std::uint64_t b = 0;
    TraceOp op{};
    switch (code) {
      case TP_OP_THREAD:
        if (!in.Varint(a) || a >= 65535) return corrupt("bad thread record");
        thread = unsigned(a);
        continue;
      case TP_OP_TIME:
        if (!in.Varint(a)) return corrupt("bad clock record");
        ms += a;
        continue;
      case TP_OP_MALLOC:
      case TP_OP_NEW:
      case TP_OP_NEW_ARRAY:
      case TP_OP_CALLOC:
        if (!in.Varint(a)) return corrupt("bad allocation record");
        op.kind = code == TP_OP_CALLOC ? TraceKind::kAllocZeroed : TraceKind::kAlloc;
        trace.callocs += code == TP_OP_CALLOC;
        op.size = a;
        op.id = new_block(a);
        push(op);
        continue;
      case TP_OP_MEMALIGN:
      case TP_OP_POSIX_MEMALIGN:
      case TP_OP_ALIGNED_ALLOC:
      case TP_OP_VALLOC:
      case TP_OP_PVALLOC:
      case TP_OP_NEW_ALIGNED:
      case TP_OP_NEW_ALIGNED_ARRAY: {
        std::uint8_t log2 = 0;
        if (!in.Varint(a) || !in.Byte(log2) || log2 > 40) return corrupt("bad aligned record");
        op.kind = TraceKind::kAllocAligned;
        op.size = a;
        op.align_log2 = log2;
        trace.max_align = std::max(trace.max_align, std::uint64_t{1} << log2);
        op.id = new_block(a);
        push(op);
        continue;
      }
      case TP_OP_FREE:
      case TP_OP_DELETE:
      case TP_OP_DELETE_ARRAY:
        if (!in.Varint(a) || !old_block(a, op.id)) return corrupt("bad free record");
        op.kind = TraceKind::kFree;
        op.size = trace.block_size[op.id];
        if (owner[op.id] != thread) {
          op.flags |= TraceOp::kOtherThread;
          ++trace.cross_thread_frees;
        }
        live -= op.size;
        push(op);
        continue;
      case TP_OP_REALLOC:
        if (!in.Varint(a) || !in.Varint(b)) return corrupt("bad realloc record");
        op.kind = TraceKind::kRealloc;
        op.old_id = TraceOp::kNoBlock;
        if (a != 0) {
          if (!old_block(a, op.old_id)) return corrupt("bad realloc record");
          if (trace.block_size[op.old_id] > UINT32_MAX) return corrupt("realloc of a huge block");
          op.old_size = std::uint32_t(trace.block_size[op.old_id]);
          if (owner[op.old_id] != thread) {
            op.flags |= TraceOp::kOtherThread;
            ++trace.cross_thread_frees;
          }
          live -= op.old_size;
        }
        ++trace.reallocs;
        op.size = b;
        op.id = new_block(b);
        push(op);
        continue;
      case TP_OP_END: {
        std::uint64_t end[5];
        for (auto& v : end)
          if (!in.Varint(v)) return corrupt("bad end record");
        if (end[0] != trace.ops || end[1] != trace.block_size.size())
          return corrupt("the end record's counts differ from the records");
        trace.unmatched_frees = end[3];
        trace.failed_calls = end[4];
        trace.complete = true;
        break;
      }
      default:
        return corrupt("unknown record");
    }
    break;
  }
  if (in.failed()) return corrupt("xz data is damaged");
  if (!trace.complete && op_limit == 0)
    return corrupt("no end record: the recording was cut short");
  if (trace.ops == 0) return corrupt("no operations");
  if (trace.ops > UINT32_MAX - 1 || trace.block_size.size() > UINT32_MAX - 1)
    return corrupt("more than 4 billion operations");
  trace.threads = unsigned(trace.per_thread.size());

  // About kPoints samples, on granule boundaries, and one after the last op.
  const std::uint64_t granules = std::max<std::uint64_t>(1, trace.ops / kPointGranule / kPoints);
  trace.sample_every = granules * kPointGranule;
  for (auto& ops : trace.per_thread) {
    for (TraceOp& op : ops) {
      const std::uint64_t done = std::uint64_t(op.seq) + 1;
      if (done % trace.sample_every == 0 || done == trace.ops) op.flags |= TraceOp::kSample;
    }
  }
  for (std::uint64_t done = trace.sample_every; done <= trace.ops; done += trace.sample_every)
    trace.points.push_back(
        {done, history[done / kPointGranule - 1], history_ms[done / kPointGranule - 1]});
  if (trace.ops % trace.sample_every != 0) trace.points.push_back({trace.ops, live, ms});
  return true;
}

std::vector<std::string> ListTraces(const std::string& dir) {
  std::vector<std::string> paths;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      const std::string name = entry->d_name;
      const std::string suffix = ".tptrace.xz";
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        paths.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string TraceName(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const std::size_t dot = name.find(".tptrace");
  return dot == std::string::npos ? name : name.substr(0, dot);
}

unsigned TraceThreadsFromNote(const std::string& path) {
  std::ifstream note(path.substr(0, path.size() - std::strlen(".tptrace.xz")) + ".txt");
  std::string line;
  while (std::getline(note, line)) {
    if (line.rfind("threads: ", 0) == 0) return unsigned(std::stoul(line.substr(9)));
  }
  return 0;
}

}  // namespace tierpool::bench
