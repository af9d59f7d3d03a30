# Catch2 v3 (Ubuntu 24.04) or v2 (Debian 12, Ubuntu 22.04). Tests include common/testing.hpp,
# which includes the right headers; COURSE_CATCH2_MAJOR tells them which one they got.
find_package(Catch2 3 QUIET)
if(Catch2_FOUND)
  set(COURSE_CATCH2_MAJOR 3)
else()
  find_package(Catch2 2 REQUIRED)
  set(COURSE_CATCH2_MAJOR 2)
endif()

# A filter that matches no test is an error in Catch2 v3 unless allowed; v2 has no such flag.
if(COURSE_CATCH2_MAJOR EQUAL 3)
  set(COURSE_CATCH2_NO_TESTS_OK --allow-running-no-tests)
else()
  set(COURSE_CATCH2_NO_TESTS_OK "")
endif()
