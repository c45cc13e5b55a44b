// How the hardened pools of every step store a free block's link: encoded with a secret key, as
// mimalloc's encoded free lists are (MI_ENCODE_FREELIST).
//
// A free block's first word names the next free block. A write through a dangling pointer (a bug,
// or an attacker) can put any address there, and a plain pool then hands that address out: one
// stray write becomes "allocate anywhere". Stored encoded, the word a stray write leaves behind
// decodes to an address nobody chose, which a hardened pool checks before it follows the link.
//
//   encode(p) = rotl(p ^ k1, k0 % 64) + k0          decode(e) = rotr(e - k0, k0 % 64) ^ k1
//
// Two keys and a rotation rather than one XOR: with a plain XOR the link of the last free block
// (nullptr) is the key itself, there for anyone who can read a freed block to take.
//
// Header-only and allocation-free: step06 uses it inside malloc, before main.
#pragma once

#include <sys/auxv.h>
#include <sys/random.h>

#include <cstdint>
#include <cstring>

namespace tierpool_common {

struct LinkKey {
  std::uintptr_t k0 = 0;
  std::uintptr_t k1 = 0;
};

inline std::uintptr_t RotateLeft(std::uintptr_t x, unsigned r) noexcept {
  r %= 64;
  return r == 0 ? x : (x << r) | (x >> (64 - r));
}
inline std::uintptr_t RotateRight(std::uintptr_t x, unsigned r) noexcept {
  return RotateLeft(x, 64 - r % 64);
}

inline std::uintptr_t EncodeLink(const void* next, const LinkKey& key) noexcept {
  const auto p = reinterpret_cast<std::uintptr_t>(next);
  return RotateLeft(p ^ key.k1, unsigned(key.k0 % 64)) + key.k0;
}
inline void* DecodeLink(std::uintptr_t stored, const LinkKey& key) noexcept {
  return reinterpret_cast<void*>(RotateRight(stored - key.k0, unsigned(key.k0 % 64)) ^ key.k1);
}

// A fresh random key: getrandom(2) (a system call, no allocation). Should the kernel refuse, the
// 16 bytes it put in this process's auxiliary vector at exec (AT_RANDOM) stand in; glibc takes
// its stack canary from those, so they are the weaker choice. Never all zero.
inline LinkKey RandomLinkKey() noexcept {
  LinkKey key;
  if (getrandom(&key, sizeof(key), GRND_NONBLOCK) != static_cast<long>(sizeof(key))) {
    if (const auto* at_random = reinterpret_cast<const void*>(getauxval(AT_RANDOM)))
      std::memcpy(&key, at_random, sizeof(key));
  }
  key.k1 |= 1;
  return key;
}

// The key of one pool (or one list): the process's random key mixed with the pool's address, so
// that a link copied from one pool into another does not decode to anything useful either.
inline LinkKey LinkKeyFor(const void* owner, const LinkKey& process_key) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(owner);
  return LinkKey{process_key.k0 ^ (a * 0x9E3779B97F4A7C15u),
                 process_key.k1 ^ (a * 0xC2B2AE3D27D4EB4Fu)};
}

// The process's key, drawn on first use.
inline const LinkKey& ProcessLinkKey() noexcept {
  static const LinkKey key = RandomLinkKey();
  return key;
}

}  // namespace tierpool_common
