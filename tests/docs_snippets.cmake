# Writes every ```cpp block of the README and the guides in docs/ into one
# C++ file, each block as the body of a function in namespace readme, with
# #line directives so that a compile error names the page and its line. The
# build compiles that file with every warning as an error, so a snippet that
# no longer compiles fails CI. A block right under a
# "<!-- whole program: examples/<file> -->" line is a program of its own,
# compared with that file instead (docs_example.cmake); one under
# "<!-- another library's code: not compiled -->" is not distlock's. The
# blocks of ${ASIO_DOC} are compiled where Asio is (DISTLOCK_README_ASIO).
# tests/docs_snippets_prelude.hpp declares what the snippets call into
# (`redis`, `log_warning`, `steps`).
#   cmake -DROOT=<source dir> -DDOCS=README.md,docs/locks.md,... -DASIO_DOC=docs/async.md
#         -DOUTPUT=docs_snippets.cpp -P docs_snippets.cmake
cmake_minimum_required(VERSION 3.16)  # the policies of the project
include("${CMAKE_CURRENT_LIST_DIR}/docs_lines.cmake")
string(REPLACE "," ";" DOCS "${DOCS}")  # the pages, comma-separated
set(out "// Generated from the README and docs/ by docs_snippets.cmake: do not edit.\n")
string(APPEND out "#include \"docs_snippets_prelude.hpp\"\n\nnamespace readme {\n")
set(number 0)
foreach(doc IN LISTS DOCS)
  read_lines("${ROOT}/${doc}" lines)
  set(asio FALSE)
  if(doc STREQUAL ASIO_DOC)
    set(asio TRUE)
  endif()
  set(in_block FALSE)
  set(previous "")
  set(line_number 0)
  foreach(line IN LISTS lines)
    restore_line(line)
    math(EXPR line_number "${line_number} + 1")
    if(in_block)
      if(line MATCHES "^```")
        set(in_block FALSE)
        if(keep)
          string(APPEND out "}\n")
          if(asio)
            string(APPEND out "#endif\n")
          endif()
          string(APPEND out "\n")
        endif()
      elseif(keep)
        string(APPEND out "${line}\n")
      endif()
    elseif(line STREQUAL "```cpp")
      set(in_block TRUE)
      set(keep TRUE)
      if(previous MATCHES "^<!-- whole program: " OR
         previous STREQUAL "<!-- another library's code: not compiled -->")
        set(keep FALSE)
      else()
        math(EXPR number "${number} + 1")
        math(EXPR first "${line_number} + 1")
        if(asio)
          string(APPEND out "#if DISTLOCK_README_ASIO\n")
        endif()
        string(APPEND out "void snippet_${number}(distlock::Client& redis) {\n")
        string(APPEND out "  static_cast<void>(redis);\n#line ${first} \"${doc}\"\n")
      endif()
    endif()
    set(previous "${line}")
  endforeach()
  if(in_block)
    message(FATAL_ERROR "${doc}: a ```cpp block is not closed")
  endif()
endforeach()
if(number EQUAL 0)
  message(FATAL_ERROR "no ```cpp block to compile in ${DOCS}")
endif()
string(APPEND out "}  // namespace readme\n")
# Rewritten only when it changes, so unchanged pages rebuild nothing.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" previous_out)
endif()
if(NOT previous_out STREQUAL out)
  file(WRITE "${OUTPUT}" "${out}")
endif()
