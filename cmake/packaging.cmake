# A Debian package from the install rules: cpack -G DEB in the build tree.
# Configure with -DCMAKE_INSTALL_PREFIX=/usr for one that installs where a
# Debian package should: the package lays its files under the prefix the
# build was configured with, because distlock.pc has that prefix written in.
#
# One package, not a -dev and a tool package: the library is headers only,
# so the -dev package would be all of it, and the tool is one binary that a
# user of the headers may as well have (it is how a shell script or cron job
# takes the same locks).
set(CPACK_PACKAGE_NAME distlock)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION
    "Header-only C++17 library of Redis distributed locks over hiredis and
OpenSSL: leases with random tokens and expiries, fencing tokens, Redlock,
read-write locks and semaphores, with its CMake package and pkg-config file.
Also the distlock command, flock(1) for a fleet of machines.")
if(NOT DEFINED CPACK_PACKAGE_CONTACT)  # -DCPACK_PACKAGE_CONTACT=... to override
  set(CPACK_PACKAGE_CONTACT "The distlock authors <maintainers@users.noreply.a-seed-243eea82.example>")
endif()
set(CPACK_PACKAGING_INSTALL_PREFIX "${CMAKE_INSTALL_PREFIX}")
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # distlock_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# What the headers compile and link against; the distlock tool's own shared
# libraries are added by dpkg-shlibdeps (package dpkg-dev; without it, CPack
# says so and the package depends on these two alone). The architecture is
# dpkg's for this machine, CPack's default: the tool is a native binary.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libhiredis-dev, libssl-dev")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)

include(CPack)
