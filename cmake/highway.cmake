# SPDX-License-Identifier: Apache-2.0
# Highway, the CPU backend's SIMD library, from one of two places:
#   SYSTEM  find_package(hwy): the distribution's package (libhwy-dev); the default for `make build`
#           and every C++ target, which may keep their system packages.
#   SOURCE  a static build of one pinned Highway release, compiled into the library itself, so that
#           nothing outside it needs libhwy at run time. The Python wheel uses it (pyproject.toml):
#           a repaired wheel must not depend on a -dev package of the machine that built it.
# SOURCE downloads the release tarball once per build folder (1.7 MB). The pinned release is the one
# Debian 12 ships (1.0.3), so both forms compile the same Highway; the tarball comes from the Debian
# archive because that is what CI can always reach. Offline, point
# FETCHCONTENT_SOURCE_DIR_HIGHWAY at an unpacked copy of the same release.
set(FLASHINDEXER_HWY SYSTEM CACHE STRING "Where Highway comes from: SYSTEM or SOURCE (pinned, static)")
set_property(CACHE FLASHINDEXER_HWY PROPERTY STRINGS SYSTEM SOURCE)
set(FLASHINDEXER_HWY_URL
  "https://deb.debian.org/debian/pool/main/h/highway/highway_1.0.3.orig.tar.gz"
  CACHE STRING "The Highway 1.0.3 release tarball (FLASHINDEXER_HWY=SOURCE)")
set(_fi_hwy_sha256 566fc77315878473d9a6bd815f7de78c73734acdcb745c3dde8579560ac5440e)

if(FLASHINDEXER_HWY STREQUAL "SYSTEM")
  find_package(hwy REQUIRED)
  message(STATUS "Highway: system package ${hwy_DIR}")
elseif(FLASHINDEXER_HWY STREQUAL "SOURCE")
  # A function scope, so that the hidden-visibility defaults end with Highway's targets.
  function(_fi_add_highway_hidden)
    set(CMAKE_CXX_VISIBILITY_PRESET hidden)
    set(CMAKE_VISIBILITY_INLINES_HIDDEN ON)
    add_subdirectory(${highway_SOURCE_DIR} ${highway_BINARY_DIR} EXCLUDE_FROM_ALL)
  endfunction()
  include(FetchContent)
  FetchContent_Declare(highway URL ${FLASHINDEXER_HWY_URL} URL_HASH SHA256=${_fi_hwy_sha256})
  FetchContent_GetProperties(highway)
  if(NOT highway_POPULATED)
    FetchContent_Populate(highway)
    # Only the core library: no contrib, tests, examples or install rules (the wheel must not
    # ship Highway's headers or archive). Static, position-independent, and with hidden symbols
    # so that the module neither exports Highway nor binds to another copy loaded in the process.
    set(HWY_ENABLE_CONTRIB OFF CACHE BOOL "" FORCE)
    set(HWY_ENABLE_EXAMPLES OFF CACHE BOOL "" FORCE)
    set(HWY_ENABLE_INSTALL OFF CACHE BOOL "" FORCE)
    set(HWY_ENABLE_TESTS OFF CACHE BOOL "" FORCE)
    set(HWY_FORCE_STATIC_LIBS ON CACHE BOOL "" FORCE)
    _fi_add_highway_hidden()
  endif()
  # Release 1.0.3 names its target `hwy`; the distribution's package exports `hwy::hwy`.
  if(NOT TARGET hwy::hwy)
    add_library(hwy::hwy ALIAS hwy)
  endif()
  message(STATUS "Highway: 1.0.3 from source, static (${highway_SOURCE_DIR})")
else()
  message(FATAL_ERROR "FLASHINDEXER_HWY=${FLASHINDEXER_HWY}: expected SYSTEM or SOURCE")
endif()
