# FindAsio.cmake: finds standalone Asio (header-only; Debian's libasio-dev
# ships no CMake config) and ends with the imported target Asio::Asio,
# which defines ASIO_STANDALONE. distlock's async layer needs Asio 1.22 or
# later (per-operation cancellation slots and async_compose's cancelled()).
#
# Sets Asio_FOUND, Asio_VERSION, Asio_INCLUDE_DIR.

if(TARGET Asio::Asio)
  set(Asio_FOUND TRUE)
  return()
endif()

find_path(Asio_INCLUDE_DIR NAMES asio.hpp asio/version.hpp)
if(Asio_INCLUDE_DIR AND EXISTS "${Asio_INCLUDE_DIR}/asio/version.hpp")
  # ASIO_VERSION is XXYYZZ: major * 100000 + minor * 100 + patch.
  file(STRINGS "${Asio_INCLUDE_DIR}/asio/version.hpp" asio_version_line
       REGEX "^#define ASIO_VERSION [0-9]+")
  string(REGEX REPLACE "^#define ASIO_VERSION ([0-9]+).*" "\\1" asio_version "${asio_version_line}")
  math(EXPR asio_major "${asio_version} / 100000")
  math(EXPR asio_minor "${asio_version} / 100 % 1000")
  math(EXPR asio_patch "${asio_version} % 100")
  set(Asio_VERSION "${asio_major}.${asio_minor}.${asio_patch}")
endif()

# Older Asio is not found (unless the caller asks for an older version).
if(NOT Asio_FIND_VERSION)
  set(Asio_FIND_VERSION 1.22)
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Asio REQUIRED_VARS Asio_INCLUDE_DIR VERSION_VAR Asio_VERSION)

if(Asio_FOUND)
  add_library(Asio::Asio INTERFACE IMPORTED GLOBAL)
  set_target_properties(Asio::Asio PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${Asio_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS ASIO_STANDALONE)
endif()
mark_as_advanced(Asio_INCLUDE_DIR)
