// Clang thread-safety annotations (-Wthread-safety); they expand to nothing under other compilers.
//
// Prefixed with FW_ because Abseil (pulled in by gRPC and protobuf headers) defines the
// unprefixed names (GUARDED_BY, ...) itself. Use them with the capabilities in common/mutex.h:
//   fw::Mutex mu_;
//   int count_ FW_GUARDED_BY(mu_);
//   void BumpLocked() FW_REQUIRES(mu_);
//   void Bump() FW_EXCLUDES(mu_);
// The check runs as the ctest `thread_safety_lint` (common/lint/thread_safety.py).
#pragma once

#if defined(__clang__)
#define FW_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define FW_THREAD_ANNOTATION_(x)
#endif

// On a class: it is a capability (a lock) named `x` in diagnostics.
#define FW_CAPABILITY(x) FW_THREAD_ANNOTATION_(capability(x))
// On a class: an RAII object that holds a capability for its lifetime.
#define FW_SCOPED_CAPABILITY FW_THREAD_ANNOTATION_(scoped_lockable)
// On a member: read and written only while holding `x`.
#define FW_GUARDED_BY(x) FW_THREAD_ANNOTATION_(guarded_by(x))
// On a pointer member: the pointee is read and written only while holding `x`.
#define FW_PT_GUARDED_BY(x) FW_THREAD_ANNOTATION_(pt_guarded_by(x))
// Lock order between capabilities.
#define FW_ACQUIRED_BEFORE(...) FW_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define FW_ACQUIRED_AFTER(...) FW_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
// On a function: the caller must hold (exclusively, or at least shared) these.
#define FW_REQUIRES(...) FW_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define FW_REQUIRES_SHARED(...) FW_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
// On a function: it takes or releases these (no argument: `this`).
#define FW_ACQUIRE(...) FW_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define FW_ACQUIRE_SHARED(...) FW_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define FW_RELEASE(...) FW_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define FW_RELEASE_SHARED(...) FW_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
#define FW_RELEASE_GENERIC(...) FW_THREAD_ANNOTATION_(release_generic_capability(__VA_ARGS__))
#define FW_TRY_ACQUIRE(...) FW_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// On a function: the caller must not hold these (the function takes them itself).
#define FW_EXCLUDES(...) FW_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
// On a function: it checks at run time that the capability is held.
#define FW_ASSERT_CAPABILITY(x) FW_THREAD_ANNOTATION_(assert_capability(x))
// On a function: it returns a reference to this capability.
#define FW_RETURN_CAPABILITY(x) FW_THREAD_ANNOTATION_(lock_returned(x))
// On a function: not checked. Each use says why in a comment.
#define FW_NO_THREAD_SAFETY_ANALYSIS FW_THREAD_ANNOTATION_(no_thread_safety_analysis)
