#ifndef TESSERA_BASE_STATUS_MACROS_H_
#define TESSERA_BASE_STATUS_MACROS_H_

// Early-return helpers for functions that return absl::Status or
// absl::StatusOr<T>. Shared by every layer.

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the status of `expr` from the enclosing function unless it is OK.
#define TESSERA_RETURN_IF_ERROR(expr)                                   \
  do {                                                                  \
    if (absl::Status tessera_status_ = (expr); !tessera_status_.ok()) { \
      return tessera_status_;                                           \
    }                                                                   \
  } while (false)

// Evaluates `expr` (an absl::StatusOr<T>); returns its status from the
// enclosing function unless it is OK, else assigns its value to `lhs` (a
// declaration or an lvalue).
#define TESSERA_ASSIGN_OR_RETURN(lhs, expr)                                  \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_CONCAT_(tessera_statusor_, __LINE__), \
                                 lhs, expr)

#define TESSERA_CONCAT_INNER_(a, b) a##b
#define TESSERA_CONCAT_(a, b) TESSERA_CONCAT_INNER_(a, b)
#define TESSERA_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = *std::move(statusor)

#endif  // TESSERA_BASE_STATUS_MACROS_H_
