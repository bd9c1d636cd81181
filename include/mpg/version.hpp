// mpg: the library version. The one place it is written: CMakeLists.txt reads these three
// macros for project(VERSION), the package version file and mpg.pc.
#pragma once

#define MPG_VERSION_MAJOR 1
#define MPG_VERSION_MINOR 0
#define MPG_VERSION_PATCH 0

#define MPG_STRINGIFY_IMPL(x) #x
#define MPG_STRINGIFY(x) MPG_STRINGIFY_IMPL(x)
#define MPG_VERSION_STRING         \
  MPG_STRINGIFY(MPG_VERSION_MAJOR) \
  "." MPG_STRINGIFY(MPG_VERSION_MINOR) "." MPG_STRINGIFY(MPG_VERSION_PATCH)

namespace mpg {
inline constexpr const char* kVersion = MPG_VERSION_STRING;
}  // namespace mpg
