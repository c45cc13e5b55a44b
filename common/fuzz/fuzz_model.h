// What every fuzz target shares: how it reads its input, the shadow model it checks a pool
// against, and the helper threads that let an input choose which thread calls the pool.
// The targets: step0*/fuzz/*_fuzz.cpp (one per allocator API); how to run them: docs/fuzzing.md.
//
// A target reads libFuzzer's bytes as a program: an opcode byte, then a few argument bytes, again
// and again. Past the end every read is 0, so any input is a valid program. Each block the pool
// hands out goes into a ShadowHeap, which checks that
//   - its address has the alignment the API promises;
//   - it overlaps no other live block (of any pool of the target);
//   - it keeps what was written into it: each block is filled with a pattern of its own, verified
//     byte by byte when the block is freed or reallocated. A block handed out twice, a free-list
//     link the pool writes into a live block, a realloc that loses bytes: each breaks a pattern.
// A violation prints what went wrong and where, then aborts; libFuzzer keeps the input.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <thread>
#include <vector>

namespace tierpool_fuzz {

// The fuzzer's bytes, read front to back; zeros once they run out.
class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool done() const { return pos_ >= size_; }
  std::uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t TwoBytes() { return static_cast<std::uint16_t>(Byte() | Byte() << 8); }

  // A number below n (n > 0).
  std::size_t Below(std::size_t n) { return n <= 256 ? Byte() % n : TwoBytes() % n; }

  // A request size of at most `max`. Small sizes come most often: an allocator's boundaries (0,
  // a pointer's size, its size classes) are dense there.
  std::size_t Size(std::size_t max) {
    const std::uint8_t kind = Byte();
    std::size_t size;
    if (kind < 128) {
      size = kind % 64;  // 0..63
    } else if (kind < 224) {
      size = TwoBytes() % 1025;  // up to 1 KiB
    } else {
      size = std::size_t{TwoBytes()} << 8 | Byte();  // up to 16 MiB
    }
    return size > max ? size % (max + 1) : size;
  }

  // A power of two from 1 to 2^max_log2.
  std::size_t Alignment(unsigned max_log2) { return std::size_t{1} << (Byte() % (max_log2 + 1)); }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// The alignment malloc promises for `size` bytes: what any object of that size can need, the
// largest power of two that divides the size, up to alignof(std::max_align_t). (A size-0 block
// holds no object; 8 is what every pool here gives it.)
inline std::size_t FundamentalAlignmentFor(std::size_t size) {
  constexpr std::size_t kMax = alignof(std::max_align_t);
  if (size == 0) return 8;
  const std::size_t lowest_bit = size & (~size + 1);
  return lowest_bit < kMax ? lowest_bit : kMax;
}

// Runs the input as a program over two pools of one API, usually its Fast and its Hardened
// variant: each opcode's high bit picks the pool (owner 0 or 1), and run(pool, owner, opcode)
// performs the operation.
template <class PoolA, class PoolB, class Run>
void RunOnTwoPools(FuzzInput& in, PoolA& pool0, PoolB& pool1, Run&& run) {
  while (!in.done()) {
    const std::uint8_t op = in.Byte();
    if (op & 0x80) {
      run(pool1, 1u, op);
    } else {
      run(pool0, 0u, op);
    }
  }
}

// One block the pool handed out, as the model remembers it.
struct LiveBlock {
  unsigned char* data;
  std::size_t size;   // bytes asked for: all of them are written and checked
  std::size_t align;  // alignment asked for (or promised), a power of two
  unsigned owner;     // which pool of the target, or which API call, it came from
  unsigned kind;      // the target's own note (how it must be freed, say)
  std::uint8_t tag;   // its fill pattern: byte k holds tag + k
};

// Every live block of a target, with their contents.
class ShadowHeap {
 public:
  // `target` names the fuzz target in failure messages.
  explicit ShadowHeap(const char* target) : target_(target) {}
  ShadowHeap(const ShadowHeap&) = delete;
  ShadowHeap& operator=(const ShadowHeap&) = delete;

  // The model keeps memory use bounded: past this, a target frees instead of allocating.
  bool full() const { return blocks_.size() >= kMaxBlocks || live_bytes_ >= kMaxLiveBytes; }
  bool empty() const { return blocks_.empty(); }
  std::size_t count() const { return blocks_.size(); }
  const LiveBlock& at(std::size_t i) const { return blocks_[i]; }
  // The index of a live block the input chooses (the model must not be empty).
  std::size_t Pick(FuzzInput& in) const { return in.Below(blocks_.size()); }

  // `p` was just handed out for `size` bytes, promised aligned to `align`: checks the address,
  // then fills and records the block.
  void Add(void* p, std::size_t size, std::size_t align, unsigned owner = 0, unsigned kind = 0) {
    if (p == nullptr) Fail("recorded a null block", p, size);
    if (reinterpret_cast<std::uintptr_t>(p) % align != 0) Fail("misaligned block", p, align);
    LiveBlock block{static_cast<unsigned char*>(p), size, align, owner, kind, next_tag_};
    next_tag_ = static_cast<std::uint8_t>(next_tag_ + 73);  // odd: all 256 tags in turn
    Claim(block);
    Fill(block);
    blocks_.push_back(block);
    live_bytes_ += size;
  }

  // Block i is about to be freed: its contents are verified and the model forgets it.
  LiveBlock Remove(std::size_t i) {
    const LiveBlock block = blocks_[i];
    Verify(block, block.data, block.size, "freed block");
    Release(block);
    blocks_[i] = blocks_.back();
    blocks_.pop_back();
    live_bytes_ -= block.size;
    return block;
  }

  // Block i was reallocated to `p` (`size` bytes, aligned to `align`), and the old address is
  // gone: the first min(old, new) bytes must have moved along, the rest is filled anew.
  void Reallocated(std::size_t i, void* p, std::size_t size, std::size_t align) {
    LiveBlock& block = blocks_[i];
    if (reinterpret_cast<std::uintptr_t>(p) % align != 0) Fail("misaligned realloc", p, align);
    Verify(block, static_cast<unsigned char*>(p), size < block.size ? size : block.size,
           "contents lost by realloc");
    Release(block);
    live_bytes_ -= block.size;
    block.data = static_cast<unsigned char*>(p);
    block.size = size;
    block.align = align;
    Claim(block);
    Fill(block);
    live_bytes_ += size;
  }

  // The blocks of `owner` died with it (a pool released, reset or destroyed): forgotten
  // unchecked, their memory is no longer theirs to read.
  void Forget(unsigned owner) {
    for (std::size_t i = blocks_.size(); i-- > 0;) {
      if (blocks_[i].owner != owner) continue;
      Release(blocks_[i]);
      live_bytes_ -= blocks_[i].size;
      blocks_[i] = blocks_.back();
      blocks_.pop_back();
    }
  }

  // Frees every live block through free(const LiveBlock&), each verified first: the end of an
  // input, so the next one starts from a clean pool.
  template <class Free>
  void RemoveAll(Free&& free) {
    while (!blocks_.empty())
      free(Remove(blocks_.size() - 1));
  }

  [[noreturn]] void Fail(const char* what, const void* p, std::size_t n) const {
    std::fprintf(stderr, "tierpool fuzz %s: %s: %p (%zu)\n", target_, what, p, n);
    std::fflush(stderr);
    std::abort();
  }

 private:
  static constexpr std::size_t kMaxBlocks = 2048;
  static constexpr std::size_t kMaxLiveBytes = std::size_t{64} << 20;

  // [start, end) of a block: a size-0 block still owns its address.
  static std::uintptr_t Start(const LiveBlock& b) {
    return reinterpret_cast<std::uintptr_t>(b.data);
  }
  static std::uintptr_t End(const LiveBlock& b) { return Start(b) + (b.size == 0 ? 1 : b.size); }

  void Claim(const LiveBlock& block) {
    const std::uintptr_t start = Start(block);
    const std::uintptr_t end = End(block);
    auto after = extents_.lower_bound(start);
    if (after != extents_.end() && after->first < end) {
      Fail("block overlaps a live block", block.data, after->first - start);
    }
    if (after != extents_.begin() && std::prev(after)->second > start) {
      Fail("block overlaps a live block", block.data, std::prev(after)->first);
    }
    extents_.emplace(start, end);
  }
  void Release(const LiveBlock& block) { extents_.erase(Start(block)); }

  static void Fill(const LiveBlock& block) {
    for (std::size_t k = 0; k < block.size; ++k)
      block.data[k] = static_cast<unsigned char>(block.tag + k);
  }
  void Verify(const LiveBlock& block, const unsigned char* at, std::size_t n,
              const char* what) const {
    for (std::size_t k = 0; k < n; ++k) {
      if (at[k] != static_cast<unsigned char>(block.tag + k)) Fail(what, at + k, k);
    }
  }

  const char* target_;
  std::vector<LiveBlock> blocks_;
  std::map<std::uintptr_t, std::uintptr_t> extents_;  // start -> end of every live block
  std::size_t live_bytes_ = 0;
  std::uint8_t next_tag_ = 1;
};

// A thread that runs one call at a time for its caller, who waits for it: the input chooses the
// thread of each operation (frees from another thread, per-thread caches) and the run stays
// deterministic, so libFuzzer can reproduce what it found.
class HelperThread {
 public:
  HelperThread() : thread_([this] { Serve(); }) {}
  HelperThread(const HelperThread&) = delete;
  HelperThread& operator=(const HelperThread&) = delete;
  // The thread exits (its thread-local caches go back to their pools) before this returns.
  ~HelperThread() {
    Run(nullptr);
    thread_.join();
  }

  // Runs `call` on this thread and returns when it is done; nullptr ends the thread.
  void Run(const std::function<void()>* call) {
    call_ = call;
    state_.store(kCall, std::memory_order_release);
    state_.notify_one();
    while (state_.load(std::memory_order_acquire) != kDone)
      state_.wait(kCall, std::memory_order_acquire);
    state_.store(kIdle, std::memory_order_relaxed);
  }
  void Run(const std::function<void()>& call) { Run(&call); }

 private:
  enum State : int { kIdle, kCall, kDone };

  void Serve() {
    for (;;) {
      // Waits on the very value it saw: a second load could read kCall, already stored, and
      // then wait for it to change, which only this thread does.
      for (int seen; (seen = state_.load(std::memory_order_acquire)) != kCall;)
        state_.wait(seen, std::memory_order_acquire);
      const std::function<void()>* call = call_;
      if (call != nullptr) (*call)();
      state_.store(kDone, std::memory_order_release);
      state_.notify_one();
      if (call == nullptr) return;
    }
  }

  std::atomic<int> state_{kIdle};
  const std::function<void()>* call_ = nullptr;  // written before state_ becomes kCall
  std::thread thread_;                           // last: starts once the rest is ready
};

}  // namespace tierpool_fuzz
