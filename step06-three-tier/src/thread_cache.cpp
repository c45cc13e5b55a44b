// The thread cache's slow paths: an empty list refilled from the central cache, a full one
// made room in, a cache over its byte budget, everything given back; and the two entries the
// fast paths call when they leave the thread (AllocateRefill, PushFull).
#include "thread_cache.h"

#include <atomic>
#include <cerrno>
#include <cstring>

#include "allocator.h"
#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {
namespace {
// A list that overflows this many times in a row with a limit above one batch gives a batch of
// its limit back: it was sized for a peak that has passed.
constexpr std::uint8_t kMaxOverages = 3;

// Without a thread cache (thread exiting, or the OS refused memory for one): go to the central
// cache one object at a time.
void* AllocateUncached(std::uint32_t cl) {
  void* object = G().central[cl].RemoveOne();
  if (object == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  return HandOut(object, cl);
}

// `ptr` is already checked and marked free. `to_back`: another thread's object, most likely
// (PushFull), handed out again after everything else on its span's list.
void FreeUncached(void* ptr, std::uint32_t cl, bool to_back = false) {
  StoreNext(ptr, nullptr);
  G().central[cl].InsertRange(ptr, nullptr, 1, to_back);
}

// Whether the n objects at `objects` lie one after another in memory, in either direction, three
// pairs in four or more: what a thread gives back when it frees a structure in the order it built
// it (or the reverse), the objects carved one after another from their spans.
bool AreNeighbours(void* const* objects, std::uint32_t n, std::size_t size) {
  if (n < 8) return false;
  const auto step = static_cast<std::uintptr_t>(size);
  const std::uint32_t allowed = (n - 1) / 4;  // pairs that may lie apart
  std::uint32_t apart = 0;
  for (std::uint32_t i = 1; i < n; ++i) {
    const std::uintptr_t d = reinterpret_cast<std::uintptr_t>(objects[i]) -
                             reinterpret_cast<std::uintptr_t>(objects[i - 1]);
    if (d != step && d != 0 - step && ++apart > allowed) return false;  // (random: at once)
  }
  return true;
}

// A batch leaving a thread cache: parked in a transfer slot if there is room, or onto its spans.
void GiveBatch(std::uint32_t cl, void* first, void* second, int n, bool to_spans) {
  if (to_spans) {
    G().central[cl].InsertToSpans(first, second, n);
  } else {
    G().central[cl].InsertRange(first, second, n);
  }
}
}  // namespace

constinit const ThreadCache empty_cache;

// --- The arrays' memory ------------------------------------------------------------------------

namespace {
// A region's first line: the next region of its arena, its size, and (while no thread owns it)
// the next spare region.
struct RegionHeader {
  void** next;
  std::size_t bytes;
  void** next_spare;
};
constexpr std::size_t kRegionHeaderBytes = kCacheLineSize;
constexpr std::size_t kFirstRegionBytes = 64 * 1024;
// Chunks from this size up give their pages back to the OS when they are put back.
constexpr std::size_t kReleasedChunkBytes = 64 * 1024;
// Spare regions kept for new threads; beyond, an exiting thread's region is unmapped.
constexpr int kMaxSpareRegions = 64;

RegionHeader* HeaderOf(void** region) {
  return reinterpret_cast<RegionHeader*>(region);
}

SpinLock spare_regions_lock;
void** spare_regions = nullptr;
int spare_region_count = 0;
std::atomic<std::size_t> region_bytes{0};  // mapped for arrays, spare regions included
}  // namespace

std::size_t SlotArena::MappedBytes() {
  return region_bytes.load(std::memory_order_relaxed);
}

SpinLock& SlotArena::SpareLock() {
  return spare_regions_lock;
}

void** SlotArena::Get(unsigned k) {
  if (free_[k] != nullptr) {
    void** chunk = free_[k];
    free_[k] = static_cast<void**>(*chunk);
    return chunk;
  }
  const std::size_t bytes = sizeof(void*) << k;
  if (static_cast<std::size_t>(limit_ - next_) < bytes) {
    // A new region, twice the last: the rest of the current one is left uncut.
    std::size_t size = last_bytes_ == 0 ? kFirstRegionBytes : 2 * last_bytes_;
    while (size < bytes + kRegionHeaderBytes)
      size *= 2;
    auto** region = static_cast<void**>(OsMap(size, kOsPageSize));
    if (region == nullptr) return nullptr;
    region_bytes.fetch_add(size, std::memory_order_relaxed);
    HeaderOf(region)->bytes = size;
    if (regions_ == nullptr) {
      regions_ = region;
    } else {  // second in the chain, so that the first stays the one Recycle keeps
      HeaderOf(region)->next = HeaderOf(regions_)->next;
      HeaderOf(regions_)->next = region;
    }
    last_bytes_ = size;
    next_ = reinterpret_cast<char*>(region) + kRegionHeaderBytes;
    limit_ = reinterpret_cast<char*>(region) + size;
  }
  void** chunk = reinterpret_cast<void**>(next_);
  next_ += bytes;
  return chunk;
}

void SlotArena::Put(void** chunk, unsigned k) {
  const std::size_t bytes = sizeof(void*) << k;
  if (bytes >= kReleasedChunkBytes) {
    // The whole OS pages after the one that holds the link: a chunk starts on a cache line of
    // its region (after the region's header), not on a page, and madvise takes pages only.
    const auto start = reinterpret_cast<std::uintptr_t>(chunk);
    const std::uintptr_t begin = (start + sizeof(void*) + kOsPageSize - 1) & ~(kOsPageSize - 1);
    const std::uintptr_t end = (start + bytes) & ~(kOsPageSize - 1);
    OsRelease(reinterpret_cast<void*>(begin), end - begin);
  }
  *chunk = free_[k];
  free_[k] = chunk;
}

void SlotArena::Recycle() {
  if (regions_ == nullptr) return;
  for (void** region = HeaderOf(regions_)->next; region != nullptr;) {
    void** next = HeaderOf(region)->next;
    region_bytes.fetch_sub(HeaderOf(region)->bytes, std::memory_order_relaxed);
    OsUnmap(region, HeaderOf(region)->bytes);
    region = next;
  }
  HeaderOf(regions_)->next = nullptr;
  bool kept = false;
  {
    SpinLockHolder hold(spare_regions_lock);
    if (spare_region_count < kMaxSpareRegions) {
      HeaderOf(regions_)->next_spare = spare_regions;
      spare_regions = regions_;
      ++spare_region_count;
      kept = true;
    }
  }
  if (!kept) {
    region_bytes.fetch_sub(HeaderOf(regions_)->bytes, std::memory_order_relaxed);
    OsUnmap(regions_, HeaderOf(regions_)->bytes);
  }
  *this = SlotArena();
}

void SlotArena::Adopt() {
  if (regions_ != nullptr) return;
  {
    SpinLockHolder hold(spare_regions_lock);
    if (spare_regions == nullptr) return;
    regions_ = spare_regions;
    spare_regions = HeaderOf(regions_)->next_spare;
    --spare_region_count;
  }
  last_bytes_ = HeaderOf(regions_)->bytes;
  next_ = reinterpret_cast<char*>(regions_) + kRegionHeaderBytes;
  limit_ = reinterpret_cast<char*>(regions_) + last_bytes_;
}

// Array `cl` is now `chunk` (2^log addresses; none: null, 0), holding `length` objects. Stored
// atomically: CachedBytes reads them from another thread.
void ThreadCache::SetArray(std::uint32_t cl, void** chunk, std::uint8_t log, std::size_t length) {
  __atomic_store_n(&lows_[cl], chunk, __ATOMIC_RELAXED);
  __atomic_store_n(&logs_[cl], log, __ATOMIC_RELAXED);
  set_top(cl, chunk + length);
}

bool ThreadCache::Reserve(std::uint32_t cl, std::size_t n) {
  if (logs_[cl] != 0 && n <= (std::size_t{1} << logs_[cl])) return true;
  unsigned k = SlotArena::kMinLog;
  while ((std::size_t{1} << k) < n)
    ++k;
  void** chunk = arena_.Get(k);
  if (chunk == nullptr) return false;
  const std::size_t length = static_cast<std::size_t>(tops_[cl] - lows_[cl]);
  const std::size_t max = static_cast<std::size_t>(ends_[cl] - lows_[cl]);
  for (std::size_t i = 0; i < length; ++i)
    chunk[i] = lows_[cl][i];
  if constexpr (kToolsSearchLeaks) {
    for (std::size_t i = 0; i < length; ++i)
      lows_[cl][i] = nullptr;
  }
  if (logs_[cl] != 0) arena_.Put(lows_[cl], logs_[cl]);
  SetArray(cl, chunk, static_cast<std::uint8_t>(k), length);
  ends_[cl] = chunk + max;
  return true;
}

void ThreadCache::SetMaxLength(std::uint32_t cl, std::uint32_t max) {
  const std::int64_t change = std::int64_t{max} - std::int64_t{max_lengths_[cl]};
  if constexpr (kSlotArrays) {
    if (max == 0 && length(cl) == 0 && logs_[cl] != 0) {  // an unused array goes back
      arena_.Put(lows_[cl], logs_[cl]);
      SetArray(cl, nullptr, 0, 0);
    }
    ends_[cl] = lows_[cl] + max;  // (Grow reserved the room)
  } else {
    set_room(cl, rooms_[cl] + change);
  }
  capacity_ += change * BudgetCost(cl);
  __atomic_store_n(&max_lengths_[cl], max, __ATOMIC_RELAXED);  // CachedBytes reads it
}

// --- The limits ----------------------------------------------------------------------------------

void ThreadCache::Init(std::int64_t budget) {
  for (std::uint32_t cl = 0; cl < kNumClasses; ++cl) {
    caps_[cl] = static_cast<std::int64_t>(ItemsPerNode(kClasses[cl].size));
    // A list: empty, both nodes are the list's end (which looks like a full node). An array:
    // empty and full, until its first refill or free gives it a chunk.
    if constexpr (!kSlotArrays)
      heads_[cl] = seconds_[cl] = ListEnd(ItemsPerNode(kClasses[cl].size));
  }
  if constexpr (kSlotArrays) arena_.Adopt();
  budget_ = budget;
}

void ThreadCache::TakeOver() {
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    if (max_lengths_[cl] != length(cl)) SetMaxLength(cl, length(cl));
    overages_[cl] = 0;
  }
  for (std::uint64_t& bits : first_frees_)
    bits = ~std::uint64_t{0};
  for (std::uint64_t& bits : refilled_)  // the exited thread's refills say nothing of this one's
    bits = 0;
  for (std::uint64_t& bits : allocates_)
    bits = 0;
}

void ThreadCache::AdoptBudget(std::int64_t budget) {
  budget_ = budget;
  if (capacity_ > budget_) Steal(0, capacity_ - budget_);
}

std::uint32_t ThreadCache::Grow(std::uint32_t cl, std::uint32_t max) {
  const std::uint32_t old = max_lengths_[cl];
  if (max <= old) return old;
  if constexpr (kByteBudget) {
    const std::int64_t size = BudgetCost(cl);
    const std::int64_t need = std::int64_t{max - old} * size;
    if (capacity_ + need > budget_) Steal(cl, capacity_ + need - budget_);
    const std::int64_t spare = budget_ - capacity_;
    if (spare < need) max = old + static_cast<std::uint32_t>(spare > 0 ? spare / size : 0);
  }
  if constexpr (kSlotArrays) {
    if (!Reserve(cl, max)) return old;
  }
  SetMaxLength(cl, max);
  return max;
}

// Round robin over the other lists, from where the last steal stopped (tcmalloc's per-CPU caches
// steal capacity between classes the same way): first what they may take but do not hold, so
// that no object moves; then, if that is not enough, objects too. A sixteenth of the budget at
// least, so that a list growing one object at a time (slow start) does not scan the others on
// every free.
void ThreadCache::Steal(std::uint32_t cl, std::int64_t bytes) {
  // The other lists have no limits to give (one class in use, as while a program builds a big
  // structure of one node size): the scan would find nothing, at every refill of that list.
  if (capacity_ <= std::int64_t{max_lengths_[cl]} * BudgetCost(cl)) return;
  if (bytes < budget_ / 16) bytes = budget_ / 16;
  for (int pass = 0; pass < 2 && bytes > 0; ++pass) {
    for (std::uint32_t tries = 1; tries < kNumClasses && bytes > 0; ++tries) {
      const std::uint32_t victim = next_victim_;
      next_victim_ = victim + 1 < kNumClasses ? victim + 1 : 1;
      const std::uint32_t max = max_lengths_[victim];
      if (victim == cl || max == 0) continue;
      const std::int64_t size = BudgetCost(victim);
      const std::uint32_t spare = pass == 0 ? max - length(victim) : max;
      const std::int64_t wanted = (bytes + size - 1) / size;
      const std::uint32_t take = wanted < spare ? static_cast<std::uint32_t>(wanted) : spare;
      if (take == 0) continue;
      if (length(victim) > max - take) ReleaseToCentral(victim, length(victim) - (max - take));
      SetMaxLength(victim, max - take);
      overages_[victim] = 0;
      bytes -= std::int64_t{take} * size;
    }
  }
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
  const std::uint32_t limit = Grow(cl, new_max);

  std::uint32_t want = limit < batch ? limit : batch;
  // At least a cache line's worth of small objects, even in slow start: two threads that took
  // one object each from a span's list would get neighbours and write one line from then on
  // (Hoard's active false sharing; fresh objects are cut at line ends in the central list).
  const std::uint32_t per_line = static_cast<std::uint32_t>(kCacheLineSize / kClasses[cl].size);
  if (want < per_line) want = per_line;
  if (want == 0) want = 1;
  void* first;
  void* second;
  bool whole_batch = true;
  if constexpr (kSlotArrays) {
    // Room for `want`, or for a parked batch whole when the central list has one (a peek,
    // without its lock: the batch is taken only if the room is there). A chunk sized for a batch
    // in each class a thread touches once would cost the pages of their addresses: 4 page faults
    // more in a short program of 23 sizes. Without room (the OS refused a chunk), one object,
    // uncached.
    const bool parked = G().central[cl].ParkedBatches() > 0;
    if (!Reserve(cl, parked && want < batch ? batch : want)) {
      return G().central[cl].RemoveOne();
    }
    whole_batch = (std::size_t{1} << logs_[cl]) >= batch;
  }
  // Arrays take the objects' addresses (a parked batch comes as a chain still, in `first`).
  void* spread[CentralFreeList::kMaxRemoved];
  const int got = kSlotArrays ? G().central[cl].RemoveRangeTo(spread, &first, &second,
                                                              static_cast<int>(want), whole_batch)
                              : G().central[cl].RemoveRange(&first, &second, static_cast<int>(want),
                                                            whole_batch);
  if (got == 0) return nullptr;
  refilled_[cl / 64] |= std::uint64_t{1} << (cl % 64);
  allocates_[cl / 64] |= std::uint64_t{1} << (cl % 64);
  if (std::size_t& growth = CentralFreeList::ThreadGrowth(); growth >= kIdleLookGrowth) {
    growth = 0;
    ReleaseIdleLists(cl);
  }
  if (static_cast<std::uint32_t>(got) > limit) Grow(cl, static_cast<std::uint32_t>(got));
  if constexpr (kSlotArrays) {
    const int room = 1 << logs_[cl];  // the array is empty: its whole chunk
    if (first != nullptr && got <= room) {
      SpreadBatch(cl, first, second, got);  // a parked batch, straight into the array
    } else {
      if (first != nullptr) SpreadBatchTo(spread, cl, first, second, got);
      // More than the chunk holds (fresh objects carved on to their line's end, and the OS
      // refused the bigger chunk Grow asked for): the ones handed out last go back, one at a
      // time. Written past the chunk, they would land in another list's array.
      const int keep = got < room ? got : room;
      for (int i = 0; i < got - keep; ++i)
        FreeUncached(spread[i], cl);
      std::memcpy(tops_[cl], spread + (got - keep), sizeof(void*) * static_cast<std::size_t>(keep));
      set_top(cl, tops_[cl] + keep);
    }
    set_top(cl, tops_[cl] - 1);
    void* ptr = *tops_[cl];
    if constexpr (kToolsSearchLeaks) *tops_[cl] = nullptr;
    // A whole batch the budget has no room for: the rest of it goes back.
    if (tops_[cl] > ends_[cl])
      ReleaseToCentral(cl, static_cast<std::uint32_t>(tops_[cl] - ends_[cl]));
    return ptr;
  }
  // The list was empty: the batch becomes the list (its first two nodes, tagged with their item
  // counts, are the list's first two), and its first object is handed out.
  void* end = ListEnd(static_cast<std::uintptr_t>(caps_[cl]));
  heads_[cl] = first;
  if constexpr (kAhead == 2) seconds_[cl] = IsListEnd(second) ? end : second;
  set_room(cl, rooms_[cl] - (got - 1));
  void* ptr = ListPop</*kRoom=*/false>(this, cl, heads_[cl]);
  // A whole batch the budget has no room for: the rest of it goes back.
  if (rooms_[cl] < 0) ReleaseToCentral(cl, static_cast<std::uint32_t>(-rooms_[cl]));
  return ptr;
}

// The batch's objects in the order its list would hand them out (each node's items from the
// last, then the node), the first on top. Each node is read once, its link first, and the node
// after the next is prefetched (a chain of kAhead 2 names it).
void ThreadCache::SpreadBatch(std::uint32_t cl, void* first, void* second, int n) {
  SpreadBatchTo(tops_[cl], cl, first, second, n);
  set_top(cl, tops_[cl] + n);
}

void ThreadCache::SpreadBatchTo(void** bottom, std::uint32_t cl, void* first, void* second,
                                int n) const {
  const auto cap = static_cast<std::uintptr_t>(caps_[cl]);
  void** slot = bottom + n;  // one past where the first object goes
  void* cursor[2] = {first, second};
  for (std::size_t k = 0; slot > bottom; ++k) {
    void* tagged = cursor[k % kAhead];
    void* node = NodeOf(tagged);
    const std::uintptr_t items = ItemsOf(tagged);
    void* next = LoadLinkOfClass(node, page_map, cl, cap);
    cursor[k % kAhead] = next;
    __builtin_prefetch(NodeOf(next));
    for (std::uintptr_t i = items; i > 0; --i)
      *--slot = TakeItemOfClass(node, i, page_map, cl);
    if constexpr (kHardened) StoreNext(node, nullptr);  // an array's mark (PopTop checks it)
    *--slot = node;
  }
}

void ThreadCache::MakeRoom(std::uint32_t cl) {
  AdoptBudget(ThreadBudget());
  const std::uint32_t batch = kClasses[cl].batch;
  const std::uint32_t max = max_lengths_[cl];
  // Slow start: a list that fills up before reaching a batch gets one more slot, if the budget
  // has one.
  if (max < batch && Grow(cl, max + 1) > max) return;
  if (max == 0) return;  // no budget at all: the caller frees the object uncached
  // Give a batch back; and when the list keeps overflowing, shrink its limit by a batch and
  // give that one back too, so that there is room for the object being freed either way.
  std::uint32_t release = batch < max ? batch : max;
  if (max > batch && ++overages_[cl] > kMaxOverages) {
    SetMaxLength(cl, max - batch);
    overages_[cl] = 0;
    release = 2 * batch < max ? 2 * batch : max;
  }
  ReleaseToCentral(cl, release);
}

// Gives the n objects a list would hand out first to the central cache, in batches, each an
// unrolled list of its own.
//
// An array: its top objects. A batch for the spans goes as addresses (InsertArrayToSpans); one
// for a transfer slot is made nodes again, cap + 1 objects a node: the first of a group handed
// out (the top) is its node's last item, the last the node itself, so that the batch hands them
// out in the array's order. Each node is written (its items and link); the items are not (but
// for the hardened mode's mark, an encoded null in their first word).
//
// A list: its first nodes, whole, and where the batch ends inside a node, that node's last
// items, one of them made a node holding the others. Only the nodes are read (their links), and
// the last few written.
void ThreadCache::ReleaseToCentral(std::uint32_t cl, std::uint32_t n, bool to_spans) {
  if constexpr (kSlotArrays) {
    ReleaseArrayTop(cl, n, to_spans);
    return;
  }
  const std::uint32_t batch = kClasses[cl].batch;
  const auto cap = static_cast<std::uintptr_t>(caps_[cl]);
  void* const end = ListEnd(cap);
  void* nodes[kMaxBatch + 1];  // the batch's nodes, tagged
  while (n > 0) {
    const std::uint32_t take = n < batch ? n : batch;
    void* cursor[2] = {heads_[cl], seconds_[cl]};  // nodes k and k + 1 (kAhead 2), or node k
    std::uint32_t taken = 0;
    std::size_t k = 0;  // whole nodes taken
    for (;;) {
      void* tagged = cursor[k % kAhead];
      const std::uint32_t objects = static_cast<std::uint32_t>(ItemsOf(tagged)) + 1;
      if (taken + objects > take) break;
      nodes[k] = tagged;
      cursor[k % kAhead] = LoadLinkOfClass(NodeOf(tagged), page_map, cl, cap);  // node k + kAhead
      taken += objects;
      ++k;
      if (taken == take) break;
    }
    // The list now starts at node k (its second is node k + 1).
    void* rest = cursor[k % kAhead];
    std::size_t m = k;  // nodes in the batch
    if (taken < take) {
      // The batch ends inside node k: its last `want` items leave it, the first of them as a
      // node that holds the others.
      const std::uintptr_t want = take - taken;
      void* split = NodeOf(rest);
      const std::uintptr_t items = ItemsOf(rest);  // > want - 1
      void* node = TakeItemOfClass(split, items, page_map, cl);
      for (std::uintptr_t i = 1; i < want; ++i)
        StoreItem(node, i, TakeItemOfClass(split, items - i, page_map, cl));
      nodes[m++] = TagNode(node, want - 1);
      rest = TagNode(split, items - want);
      if (m > kAhead) StoreNext(NodeOf(nodes[m - 1 - kAhead]), nodes[m - 1]);  // it named node k
    }
    // The batch's last kAhead nodes end it.
    for (std::size_t i = m >= kAhead ? m - kAhead : 0; i < m; ++i)
      StoreNext(NodeOf(nodes[i]), end);
    heads_[cl] = rest;
    if constexpr (kAhead == 2) seconds_[cl] = cursor[(k + 1) & 1];
    set_room(cl, rooms_[cl] + take);
    GiveBatch(cl, nodes[0], m > 1 ? nodes[1] : end, static_cast<int>(take), to_spans);
    n -= take;
  }
}

// The array of class `cl` now ends at `group`: the objects above it have left.
void ThreadCache::ReleasedTop(std::uint32_t cl, void** group) {
  if constexpr (kToolsSearchLeaks) {
    for (void** slot = group; slot < tops_[cl]; ++slot)
      *slot = nullptr;
  }
  set_top(cl, group);
}

void ThreadCache::ReleaseArrayTop(std::uint32_t cl, std::uint32_t n, bool to_spans) {
  const std::uint32_t batch = kClasses[cl].batch;
  const auto cap = static_cast<std::uintptr_t>(caps_[cl]);
  void* const end = ListEnd(cap);
  void* nodes[kMaxBatch];  // the batch's nodes, tagged
  // A batch of neighbours from a class this thread allocates goes to its spans, not to a slot:
  // the thread is most likely freeing what it built, in order, and nobody is waiting for these
  // objects; parked, they would pin their spans while the program's next phase takes new pages.
  // On their spans, freed while their lines are still in this core's cache, the spans empty one
  // after another and go back to the page heap. A consumer's batches (a class it only frees) are
  // neighbours too, and its producer's next refill takes them: those are parked.
  const bool own = !to_spans && Allocates(cl);
  while (n > 0) {
    const std::uint32_t take = n < batch ? n : batch;
    void** group = tops_[cl];  // one past the group's first object
    const bool batch_to_spans =
        to_spans || (own && AreNeighbours(group - take, take, ClassSize(cl)));
    if (batch_to_spans) {  // the spans take addresses: no node is written, and none read back
      G().central[cl].InsertArrayToSpans(group - take, static_cast<int>(take));
      ReleasedTop(cl, group - take);
      n -= take;
      continue;
    }
    std::size_t m = 0;
    for (std::uint32_t left = take; left > 0;) {
      const std::uintptr_t objects = left < cap + 1 ? left : cap + 1;
      group -= objects;
      void* node = group[0];  // the group's bottom: handed out last
      for (std::uintptr_t i = 1; i < objects; ++i) {
        void* item = group[i];  // item i: the last (the group's top) is handed out first
        if constexpr (kHardened) StoreNext(item, nullptr);  // checked when the item is taken
        StoreItem(node, i, item);
      }
      nodes[m++] = TagNode(node, objects - 1);
      left -= static_cast<std::uint32_t>(objects);
    }
    for (std::size_t i = 0; i < m; ++i)
      StoreNext(NodeOf(nodes[i]), i + kAhead < m ? nodes[i + kAhead] : end);
    ReleasedTop(cl, group);
    GiveBatch(cl, nodes[0], m > 1 ? nodes[1] : end, static_cast<int>(take), /*to_spans=*/false);
    n -= take;
  }
}

void ThreadCache::ReleaseIdleLists(std::uint32_t growing) {
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    const bool refilled = ((refilled_[cl / 64] >> (cl % 64)) & 1) != 0;
    const std::uint32_t keep = kClasses[cl].batch;
    if (cl != growing && !refilled && length(cl) > keep)
      ReleaseToCentral(cl, length(cl) - keep, /*to_spans=*/true);
  }
  for (std::uint64_t& bits : refilled_)
    bits = 0;
  refilled_[growing / 64] |= std::uint64_t{1} << (growing % 64);
}

void ThreadCache::ReleaseAll() {
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    if (length(cl) > 0) ReleaseToCentral(cl, length(cl));
    SetMaxLength(cl, 0);
    overages_[cl] = 0;
  }
}

std::size_t ThreadCache::CachedBytes() const {
  std::size_t bytes = 0;
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    if constexpr (kSlotArrays) {
      // Read while the owner moves its arrays: a length that cannot be is not counted.
      void** top = __atomic_load_n(&tops_[cl], __ATOMIC_RELAXED);
      void** low = __atomic_load_n(&lows_[cl], __ATOMIC_RELAXED);
      const std::uint8_t log = __atomic_load_n(&logs_[cl], __ATOMIC_RELAXED);
      if (top > low && top - low <= (std::ptrdiff_t{1} << log))
        bytes += static_cast<std::size_t>(top - low) * ClassSize(cl);
      continue;
    }
    const std::int64_t max = __atomic_load_n(&max_lengths_[cl], __ATOMIC_RELAXED);
    const std::int64_t length = max - __atomic_load_n(&rooms_[cl], __ATOMIC_RELAXED);
    if (length > 0) bytes += static_cast<std::size_t>(length) * ClassSize(cl);
  }
  return bytes;
}

void* AllocateRefill(ThreadCache* tc, std::uint32_t cl) {
  if (tc == &empty_cache) {  // the thread's first allocation of all (it sets the allocator up)
    tc = GetOrCreateCache();
    if (tc == nullptr) return AllocateUncached(cl);
    return AllocateClass(tc, cl);
  }
  if (!Cached(cl)) {
    Tick();
    return AllocateUncached(cl);
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
  if (!Cached(cl)) {  // (no cache needed: an object to free means the allocator is set up)
    Tick();
    return FreeUncached(ptr, cl);
  }
  if (tc == &empty_cache) {  // the thread's first free of all
    tc = GetOrCreateCache();
    if (tc == nullptr) return FreeUncached(ptr, cl);
    return PushChecked(tc, ptr, cl);
  }
  // A list without a limit is, most often, that of a class this thread never had an object of:
  // the object freed into it was allocated by another thread, whose other objects may share its
  // cache line. Kept here, it would be the first this thread allocates (the list is LIFO), and
  // from then on the one it reuses: two threads writing one line (Hoard's passive false sharing).
  // It goes back to its span instead, at the back of the span's list: a refill hands out fresh
  // lines first (CentralFreeList::ChainRuns), then the objects that came back with their lines,
  // and this one last. The list gets its limit all the same, for the frees to come. (A limit
  // also falls to 0 when Steal takes it, or a flush: one free then goes this way. A cache taken
  // over from an exited thread keeps its objects, but not its limits: see TakeOver.)
  const bool first_of_class = tc->max_length(cl) == 0 || tc->TakeFirstFree(cl);
  tc->MakeRoom(cl);
  Tick();
  if (!first_of_class && tc->room(cl) > 0) return PushChecked(tc, ptr, cl);
  FreeUncached(ptr, cl, first_of_class);  // (or: the budget is spent, the list's limit 0)
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
