#include "loader/registration.h"

namespace loader {

namespace detail {
std::string registration_hint(const std::string& macro, const std::string& function) {
  return "Register it with " + macro + " (or " + function +
         ") in the program before it is needed; worker processes register it the same way. "
         "If the registration is in a static library (.a), the linker dropped it because nothing "
         "else in that object file is used: link the library whole (CMake 3.24+: "
         "target_link_libraries(app PRIVATE \"$<LINK_LIBRARY:WHOLE_ARCHIVE,mylib>\"); by hand: "
         "-Wl,--whole-archive -lmylib -Wl,--no-whole-archive), or call a function of that library "
         "that registers it from main()";
}
}  // namespace detail

}  // namespace loader
