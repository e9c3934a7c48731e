# Fails unless the ```cpp block under DOC's "<!-- whole program: EXAMPLE -->"
# line is exactly the part of EXAMPLE between its "// [${MARKER}]" and
# "// [${MARKER} end]" lines.
#   cmake -DROOT=<source dir> -DDOC=docs/cluster.md -DEXAMPLE=examples/cluster.cpp
#         -DMARKER="README cluster" -P docs_example.cmake
cmake_minimum_required(VERSION 3.16)  # the policies of the project
file(READ "${ROOT}/${DOC}" doc)
file(READ "${ROOT}/${EXAMPLE}" example)

set(heading "<!-- whole program: ${EXAMPLE} -->\n```cpp\n")
string(FIND "${doc}" "${heading}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${DOC}: no \"<!-- whole program: ${EXAMPLE} -->\" line over a ```cpp block")
endif()
string(LENGTH "${heading}" length)
math(EXPR at "${at} + ${length}")
string(SUBSTRING "${doc}" ${at} -1 doc)
string(FIND "${doc}" "\n```" end)
math(EXPR end "${end} + 1")
string(SUBSTRING "${doc}" 0 ${end} block)

set(open_marker "// [${MARKER}]\n")
string(FIND "${example}" "${open_marker}" at)
string(FIND "${example}" "// [${MARKER} end]" end)
if(at EQUAL -1 OR end EQUAL -1)
  message(FATAL_ERROR "${EXAMPLE}: no \"// [${MARKER}]\" ... \"// [${MARKER} end]\" region")
endif()
string(LENGTH "${open_marker}" length)
math(EXPR at "${at} + ${length}")
math(EXPR length "${end} - ${at}")
string(SUBSTRING "${example}" ${at} ${length} region)

if(NOT block STREQUAL region)
  message(FATAL_ERROR
    "${DOC}'s block differs from ${EXAMPLE}; copy the file's marked region into it.\n"
    "--- ${DOC} ---\n${block}--- ${EXAMPLE} ---\n${region}")
endif()
message(STATUS "${DOC} shows ${EXAMPLE} as it is")
