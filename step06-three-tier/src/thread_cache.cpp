// The thread cache's slow paths: an empty list refilled from the central cache, a full one
// made room in, a cache over its byte budget, everything given back; and the two entries the
// fast paths call when they leave the thread (AllocateRefill, PushFull).
#include "thread_cache.h"

#include <cerrno>

#include "allocator.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {
namespace {
// A list that overflows this many times in a row with a limit above one batch gives a batch of
// its limit back: it was sized for a peak that has passed.
constexpr std::uint8_t kMaxOverages = 3;
// Items per node at most (thread_cache.h).
constexpr std::size_t kMaxItemsPerNode = 7;
// Most objects a refill brings (a batch, or a few more to finish a carved cache line), and most a
// release takes at once (a batch).
constexpr std::size_t kMaxBatch = 128;
constexpr std::size_t kMaxRefill = kMaxBatch + kCacheLineSize / 8;
static_assert([] {
  for (int cl = 1; cl < kNumClasses; ++cl)
    if (kClasses[cl].batch > kMaxBatch) return false;
  return true;
}());

// Without a thread cache (thread exiting, or the OS refused memory for one): go to the central
// cache one object at a time.
void* AllocateUncached(std::uint32_t cl) {
  void* first;
  void* second;
  if (G().central[cl].RemoveRange(&first, &second, 1) == 0) {
    errno = ENOMEM;
    return nullptr;
  }
  return HandOut(first, cl);
}

// `ptr` is already checked and marked free.
void FreeUncached(void* ptr, std::uint32_t cl) {
  StoreNext(ptr, nullptr);
  G().central[cl].InsertRange(ptr, nullptr, 1);
}
}  // namespace

constinit const ThreadCache empty_cache;

void ThreadCache::Init(std::int64_t budget) {
  for (std::uint32_t cl = 0; cl < kNumClasses; ++cl) {
    sizes_[cl] = kClasses[cl].size;
    // Items a node holds: the words after its link, at most 7 (a 64-byte node, one line).
    const std::size_t words = kClasses[cl].size / sizeof(void*);
    const std::size_t cap = words == 0                     ? 0
                            : words - 1 < kMaxItemsPerNode ? words - 1
                                                           : kMaxItemsPerNode;
    caps_[cl] = static_cast<std::int64_t>(cap);
    counts_[cl] = caps_[cl];  // empty: looks like a full first node
  }
  __atomic_store_n(&budget_, budget, __ATOMIC_RELAXED);
  set_budget_left(budget);
}

void ThreadCache::AdoptBudget(std::int64_t budget) {
  if (budget == budget_) return;
  set_budget_left(budget_left_ + (budget - budget_));
  __atomic_store_n(&budget_, budget, __ATOMIC_RELAXED);
}

void* ThreadCache::FetchFromCentral(std::uint32_t cl) {
  AdoptBudget(ThreadBudget());
  const std::uint32_t batch = kClasses[cl].batch;
  // The list ran dry: it deserves a bigger limit (one more object during slow start, then one
  // more batch).
  const std::uint32_t max = max_lengths_[cl];
  std::uint32_t new_max = max < batch ? max + 1 : max + batch;
  if (new_max > kMaxListLength) new_max = kMaxListLength - kMaxListLength % batch;
  if (kClasses[cl].size >= kPageSize) {
    const std::uint32_t byte_cap = static_cast<std::uint32_t>(kMaxListBytes / kClasses[cl].size);
    if (new_max > batch && new_max > byte_cap) new_max = byte_cap > batch ? byte_cap : batch;
  }
  if (new_max > max) SetMaxLength(cl, new_max);

  std::uint32_t want = max_lengths_[cl] < batch ? max_lengths_[cl] : batch;
  if (want == 0) want = 1;
  void* first;
  void* second;
  const int got = G().central[cl].RemoveRange(&first, &second, static_cast<int>(want),
                                              /*whole_batch=*/true);
  if (got == 0) return nullptr;
  if (static_cast<std::uint32_t>(got) > max_lengths_[cl]) SetMaxLength(cl, got);  // a whole batch
  // Hand out the first object, keep the rest (the list was empty): the chain is walked into an
  // array, then pushed from its end, so the list hands the objects out in the chain's order (a
  // fresh span's in address order).
  if (second != nullptr) {
    void* objects[kMaxRefill];
    void* cursor[2] = {first, second};  // objects at even and odd positions
    const int n = got < int{kMaxRefill} ? got : int{kMaxRefill};
    for (int i = 0; i < n; ++i) {
      objects[i] = cursor[i & 1];
      if (i + 2 < got) cursor[i & 1] = LoadNextOfClass(objects[i], page_map, cl);
    }
    if (TIERPOOL_UNLIKELY(got > n)) Fatal("refill larger than expected", first);
    for (int i = got - 1; i >= 1; --i)
      ListPush(this, cl, objects[i]);
    rooms_[cl] -= got - 1;
    set_budget_left(budget_left_ - std::int64_t{got - 1} * sizes_[cl]);
  }
  return first;
}

void ThreadCache::MakeRoom(std::uint32_t cl) {
  const std::uint32_t batch = kClasses[cl].batch;
  const std::uint32_t max = max_lengths_[cl];
  if (max < batch) {
    // Slow start: a list that fills up before reaching a batch gets one more slot.
    SetMaxLength(cl, max + 1);
    return;
  }
  // Give a batch back; and when the list keeps overflowing, shrink its limit by a batch and
  // give that one back too, so that there is room for the object being freed either way.
  std::uint32_t release = batch;
  if (max > batch && ++overages_[cl] > kMaxOverages) {
    SetMaxLength(cl, max - batch);
    overages_[cl] = 0;
    release = 2 * batch < max ? 2 * batch : max;
  }
  ReleaseToCentral(cl, release);
}

void ThreadCache::OverBudget(std::uint32_t cl) {
  AdoptBudget(ThreadBudget());
  // The newest objects go: they were just written, so walking to the end of the batch touches
  // cached lines only. First from the list that is growing, if it holds a batch...
  const std::uint32_t batch = kClasses[cl].batch;
  if (length(cl) >= batch) ReleaseToCentral(cl, batch);
  // ... then from whichever list holds the most bytes.
  while (budget_left_ < 0) {
    std::uint32_t fullest = 0;
    std::uint64_t most = 0;
    for (std::uint32_t c = 1; c < kNumClasses; ++c) {
      const std::uint64_t bytes = std::uint64_t{length(c)} * sizes_[c];
      if (bytes > most) {
        most = bytes;
        fullest = c;
      }
    }
    if (fullest == 0) break;  // nothing cached: the budget itself shrank below zero
    const std::uint32_t n = kClasses[fullest].batch;
    const std::uint32_t available = length(fullest);
    ReleaseToCentral(fullest, available < n ? available : n);
  }
  Tick();
}

// Detaches the first n objects of the list (the ones it would hand out first) and gives them to
// the central cache in batches, each a chain of its own (object k links to object k + 2).
void ThreadCache::ReleaseToCentral(std::uint32_t cl, std::uint32_t n) {
  const std::uint32_t batch = kClasses[cl].batch;
  void* objects[kMaxBatch];
  while (n > 0) {
    const std::uint32_t take = n < batch ? n : batch;
    for (std::uint32_t i = 0; i < take; ++i)
      objects[i] = ListPop(this, cl, heads_[cl]);
    for (std::uint32_t i = 0; i < take; ++i)
      StoreNext(objects[i], i + 2 < take ? objects[i + 2] : nullptr);
    rooms_[cl] += take;
    set_budget_left(budget_left_ + std::int64_t{take} * sizes_[cl]);
    G().central[cl].InsertRange(objects[0], take > 1 ? objects[1] : nullptr,
                                static_cast<int>(take));
    n -= take;
  }
}

void ThreadCache::ReleaseAll() {
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    if (length(cl) > 0) ReleaseToCentral(cl, length(cl));
    SetMaxLength(cl, 0);
    overages_[cl] = 0;
  }
}

std::size_t ThreadCache::CachedBytes() const {
  const std::int64_t left = __atomic_load_n(&budget_left_, __ATOMIC_RELAXED);
  const std::int64_t cached = __atomic_load_n(&budget_, __ATOMIC_RELAXED) - left;
  return cached > 0 ? static_cast<std::size_t>(cached) : 0;
}

void* AllocateRefill(ThreadCache* tc, std::uint32_t cl) {
  if (tc == &empty_cache) {  // the thread's first allocation of all
    tc = GetOrCreateCache();
    if (tc == nullptr) return AllocateUncached(cl);
    return AllocateClass(tc, cl);
  }
  void* ptr = tc->FetchFromCentral(cl);
  Tick();
  if (TIERPOOL_UNLIKELY(ptr == nullptr)) {
    errno = ENOMEM;
    return nullptr;
  }
  return HandOut(ptr, cl);
}

void PushFull(ThreadCache* tc, void* ptr, std::uint32_t cl) {
  if (tc == &empty_cache) {  // the thread's first free of all
    tc = GetOrCreateCache();
    if (tc == nullptr) return FreeUncached(ptr, cl);
    return PushChecked(tc, ptr, cl);
  }
  tc->MakeRoom(cl);
  Tick();
  if (tc->room(cl) > 0) return PushChecked(tc, ptr, cl);
  FreeUncached(ptr, cl);  // the budget is spent and this list has a limit of 0
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
