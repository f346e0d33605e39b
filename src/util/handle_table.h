#pragma once
// Engines hand out prefixes and slots as small integer handles: a table of owned objects whose
// freed entries are reused.
#include <memory>
#include <string>
#include <vector>

#include "bestofn/util/error.h"

namespace bestofn {

template <typename T>
class HandleTable {
 public:
  explicit HandleTable(std::string what) : what_(std::move(what)) {}
  int put(std::unique_ptr<T> x) {
    for (std::size_t i = 0; i < items_.size(); ++i)
      if (!items_[i]) {
        items_[i] = std::move(x);
        return static_cast<int>(i);
      }
    items_.push_back(std::move(x));
    return static_cast<int>(items_.size() - 1);
  }
  // Throws bestofn::Error "no slot 7" for a handle that is not live.
  T& at(int id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= items_.size() || !items_[static_cast<std::size_t>(id)])
      throw Error("no " + what_ + " " + std::to_string(id));
    return *items_[static_cast<std::size_t>(id)];
  }
  void erase(int id) {
    at(id);
    items_[static_cast<std::size_t>(id)].reset();
  }

 private:
  std::string what_;
  std::vector<std::unique_ptr<T>> items_;
};

}  // namespace bestofn
