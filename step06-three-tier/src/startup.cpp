// Start-up: the allocator's global objects, and InitSlow, which attaches the tiers to each other
// on the first call (before main, often: the loader and libc allocate before any constructor).
#include "startup.h"

#include <sched.h>

#include <type_traits>

#include "allocator.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

PageMap page_map;  // no constructor: all zeros from the loader (see page_map.h)
static_assert(std::is_trivially_default_constructible_v<PageMap>);
std::atomic<int> init_state{0};
tierpool_common::LinkKey free_list_key;
char valgrind_pool_anchor = 0;
char valgrind_leak_search_anchor[16] = {};
// The pointer that keeps the anchor reachable (so it is never reported itself).
char* valgrind_leak_search_anchor_ref = valgrind_leak_search_anchor;

namespace {

constinit Globals globals;
static_assert(std::is_trivially_destructible_v<Globals>);  // never torn down at exit

}  // namespace

Globals& G() {
  return globals;
}

void InitSlow() {
  int expected = 0;
  if (init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    if constexpr (kHardened) free_list_key = tierpool_common::RandomLinkKey();
    ToolsCreatePool();
    Globals* g = &globals;
    g->page_heap.Attach(&page_map, &g->span_pool);
    CentralFreeList::Attach(&g->page_heap, &page_map, g->central, g->transfer_slots);
    g->thread_budget.store(static_cast<std::int64_t>(kMaxThreadCacheBudget),
                           std::memory_order_relaxed);
    g->thread_exit_key_ok = pthread_key_create(&g->thread_exit_key, DestroyThreadCache) == 0;
    ReadReleaseThreadSetting();
    init_state.store(2, std::memory_order_release);
    return;
  }
  while (init_state.load(std::memory_order_acquire) != 2)
    sched_yield();
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
