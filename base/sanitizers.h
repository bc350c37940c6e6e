#ifndef TESSERA_BASE_SANITIZERS_H_
#define TESSERA_BASE_SANITIZERS_H_

// TESSERA_SANITIZED is defined in builds with ASan or TSan (GCC or clang).
// They reserve terabytes of address space, which address-space and data
// limits cannot hold: tests of such limits skip themselves there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TESSERA_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TESSERA_SANITIZED 1
#endif
#endif

// TESSERA_THREAD_SANITIZED is defined in builds with TSan, which slows
// every instrumented thread hand-off many times over.
#if defined(__SANITIZE_THREAD__)
#define TESSERA_THREAD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TESSERA_THREAD_SANITIZED 1
#endif
#endif

#endif  // TESSERA_BASE_SANITIZERS_H_
