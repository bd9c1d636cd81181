#pragma once

#define MPG_VERSION_MAJOR 1
#define MPG_VERSION_MINOR 0
#define MPG_VERSION_PATCH 0

namespace mpg {
inline constexpr const char* kVersion = "1.0.0";
}  // namespace mpg
