// How the pool tells the memory tools what it does with its slots.
//
// A pool hands out pieces of memory it got in one big chunk, so neither AddressSanitizer nor
// valgrind can see a use-after-free inside it: to them the whole chunk is one live block. These
// hooks describe every slot's life to them:
//   - ASan (TIERPOOL_ASAN): a free or never-handed-out slot is poisoned, so touching it is a
//     "use-after-poison" report with the stack of the bad access.
//   - valgrind (STEP05_VALGRIND_HOOKS, defined by CMake in the memcheck build; not step02's
//     TIERPOOL_VALGRIND, which any include of step02 turns on and which would put client requests
//     on this pool's fast path in every build): the pool is a "mempool"; each handed-out slot is a
//     block of it, so memcheck reports invalid reads/writes, frees of pointers that are not blocks,
//     and blocks still live when the program ends (leaks), exactly as for malloc.
// Without either macro every hook is an empty inline function: the release build pays nothing.
#pragma once

#include <cstddef>

#if TIERPOOL_ASAN
#include <sanitizer/asan_interface.h>
#endif
#if STEP05_VALGRIND_HOOKS
#include <valgrind/memcheck.h>
#endif

namespace step05::tools {

// A chunk about to go back to the OS: clear its poison, or the next mapping at this address
// would inherit it.
inline void ChunkUnmapping([[maybe_unused]] void* p, [[maybe_unused]] std::size_t n) {
#if TIERPOOL_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#endif
#if STEP05_VALGRIND_HOOKS
  VALGRIND_MAKE_MEM_UNDEFINED(p, n);
#endif
}

// The pool itself reads or writes a free slot (its link, or the hardened mode's fill pattern).
inline void OpenSlot([[maybe_unused]] void* p, [[maybe_unused]] std::size_t n) {
#if TIERPOOL_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#endif
#if STEP05_VALGRIND_HOOKS
  VALGRIND_MAKE_MEM_DEFINED(p, n);
#endif
}

// ...and is done with it: the slot is out of bounds again for everybody.
inline void CloseSlot([[maybe_unused]] void* p, [[maybe_unused]] std::size_t n) {
#if TIERPOOL_ASAN
  ASAN_POISON_MEMORY_REGION(p, n);
#endif
#if STEP05_VALGRIND_HOOKS
  VALGRIND_MAKE_MEM_NOACCESS(p, n);
#endif
}

// A slot becomes the caller's (after OpenSlot): for valgrind a new block of the mempool `pool`,
// its contents undefined until the caller writes them.
inline void HandOut([[maybe_unused]] const void* pool, [[maybe_unused]] void* p,
                    [[maybe_unused]] std::size_t n) {
#if TIERPOOL_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#endif
#if STEP05_VALGRIND_HOOKS
  VALGRIND_MEMPOOL_ALLOC(pool, p, n);
#endif
}

// The caller gives a slot back. valgrind reports here a pointer that is not a live block.
inline void TakeBack([[maybe_unused]] const void* pool, [[maybe_unused]] void* p) {
#if STEP05_VALGRIND_HOOKS
  VALGRIND_MEMPOOL_FREE(pool, p);
#endif
}

inline void PoolCreated([[maybe_unused]] const void* pool) {
#if STEP05_VALGRIND_HOOKS
  VALGRIND_CREATE_MEMPOOL(pool, 0, 0);
#endif
}

inline void PoolDestroyed([[maybe_unused]] const void* pool) {
#if STEP05_VALGRIND_HOOKS
  VALGRIND_DESTROY_MEMPOOL(pool);
#endif
}

// A new chunk: nothing in it is handed out yet, everything is out of bounds.
inline void ChunkMapped(void* p, std::size_t n) {
  CloseSlot(p, n);
}

}  // namespace step05::tools
