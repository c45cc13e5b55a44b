#include "thread_cache.h"

#include "allocator.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {
namespace {
// A list that overflows this many times in a row with a limit above one batch gives a batch of
// its limit back: it was sized for a peak that has passed.
constexpr std::uint8_t kMaxOverages = 3;
}  // namespace

void* ThreadCache::FetchFromCentral(std::uint32_t cl) {
  FreeList& list = lists_[cl];
  const std::uint32_t batch = kClasses[cl].batch;
  // The list ran dry: it deserves a bigger limit (one more object during slow start, then one
  // more batch), if the budget allows.
  std::uint32_t new_max = list.max_length < batch ? list.max_length + 1 : list.max_length + batch;
  if (new_max > kMaxListLength) new_max = kMaxListLength - kMaxListLength % batch;
  if (new_max > list.max_length) TryGrow(cl, new_max);

  std::uint32_t want = list.max_length < batch ? list.max_length : batch;
  if (want == 0) want = 1;
  void* head;
  void* tail;
  const int got = G().central[cl].RemoveRange(&head, &tail, static_cast<int>(want));
  if (got == 0) return nullptr;
  // Hand out the first object, keep the rest.
  void* rest = LoadNext(head);
  if (rest != nullptr) {
    StoreNext(tail, list.head);
    list.head = rest;
    list.SetLength(list.length + static_cast<std::uint32_t>(got) - 1);
  }
  return head;
}

void ThreadCache::ListTooLong(std::uint32_t cl) {
  FreeList& list = lists_[cl];
  const std::uint32_t batch = kClasses[cl].batch;
  if (list.max_length < batch) {
    // Slow start: a list that fills up before reaching a batch gets one more slot.
    if (TryGrow(cl, list.max_length + 1) && list.length <= list.max_length) return;
  } else if (list.max_length > batch && ++overages_[cl] > kMaxOverages) {
    const std::uint32_t shrunk = list.max_length - batch;
    allowance_ -= std::size_t{list.max_length - shrunk} * kClasses[cl].size;
    list.max_length = shrunk;
    overages_[cl] = 0;
  }
  const std::uint32_t n = list.length < batch ? list.length : batch;
  ReleaseToCentral(cl, n);
}

// Raises the limit of `cl` to new_max within the byte budget, halving every limit first if the
// budget is spent. False when even that leaves no room.
bool ThreadCache::TryGrow(std::uint32_t cl, std::uint32_t new_max) {
  FreeList& list = lists_[cl];
  const std::size_t extra = std::size_t{new_max - list.max_length} * kClasses[cl].size;
  if (allowance_ + extra > kThreadCacheBudget) {
    Scavenge();
    if (allowance_ + extra > kThreadCacheBudget) return false;
  }
  allowance_ += extra;
  list.max_length = new_max;
  return true;
}

void ThreadCache::Scavenge() {
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    FreeList& list = lists_[cl];
    const std::uint32_t halved = list.max_length / 2;
    allowance_ -= std::size_t{list.max_length - halved} * kClasses[cl].size;
    list.max_length = halved;
    overages_[cl] = 0;
    if (list.length > halved) ReleaseToCentral(cl, list.length - halved);
  }
}

// Detaches the first n objects of the list and gives them to the central cache in batches.
void ThreadCache::ReleaseToCentral(std::uint32_t cl, std::uint32_t n) {
  FreeList& list = lists_[cl];
  const std::uint32_t batch = kClasses[cl].batch;
  while (n > 0) {
    const std::uint32_t take = n < batch ? n : batch;
    void* head = list.head;
    void* tail = head;
    for (std::uint32_t i = 1; i < take; ++i)
      tail = LoadNext(tail);
    list.head = LoadNext(tail);
    StoreNext(tail, nullptr);
    list.SetLength(list.length - take);
    G().central[cl].InsertRange(head, tail, static_cast<int>(take));
    n -= take;
  }
}

void ThreadCache::ReleaseAll() {
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    FreeList& list = lists_[cl];
    if (list.length > 0) ReleaseToCentral(cl, list.length);
    list.max_length = 0;
    overages_[cl] = 0;
  }
  allowance_ = 0;
}

std::size_t ThreadCache::CachedBytes() const {
  std::size_t bytes = 0;
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl)
    bytes += std::size_t{lists_[cl].LengthForStats()} * kClasses[cl].size;
  return bytes;
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
