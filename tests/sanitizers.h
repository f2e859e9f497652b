// What a sanitizer build changes for the tests, known at compile time.
#pragma once

namespace loader::testing {

#if defined(__SANITIZE_THREAD__)  // GCC
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)  // Clang
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

/// The address build is also the UndefinedBehaviorSanitizer build (CMakeLists.txt:
/// -fsanitize=address,undefined); GCC defines no macro of its own for UBSan.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUndefinedSanitizer = true;
#else
inline constexpr bool kUndefinedSanitizer = false;
#endif

/// Multiplier for deadlines and timeouts that only bound how long a failure takes to
/// show (never a speed the test asserts): ThreadSanitizer makes every process several
/// times slower, its start-up included, and the suite runs on loaded 2-core machines.
inline constexpr int kSlowdown = kThreadSanitizer ? 3 : 1;

}  // namespace loader::testing
