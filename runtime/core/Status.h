// The runtime's result type: success, or a message that names what failed and why
// (the file, the rank, the tensor). Never abort() on user input.
#ifndef MT_RUNTIME_CORE_STATUS_H
#define MT_RUNTIME_CORE_STATUS_H

#include <sstream>
#include <string>
#include <utility>

namespace mt {

/// Concatenates anything streamable: the parts of an error message.
template <typename... Parts> std::string cat(const Parts &...parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

class [[nodiscard]] Status {
public:
  static Status success() { return Status(); }
  static Status failure(std::string message) {
    Status s;
    s.failed_ = true;
    s.message_ = std::move(message);
    return s;
  }
  bool ok() const { return !failed_; }
  const std::string &message() const { return message_; }

private:
  bool failed_ = false;
  std::string message_;
};

} // namespace mt

/// Returns from the calling function with `expr`'s Status if it failed.
#define MT_TRY(expr)                                                                       \
  do {                                                                                     \
    if (::mt::Status mtTryStatus = (expr); !mtTryStatus.ok())                              \
      return mtTryStatus;                                                                  \
  } while (0)

#endif
