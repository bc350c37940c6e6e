#ifndef TESSERA_TESTS_CONFORMANCE_STATUS_MACROS_H_
#define TESSERA_TESTS_CONFORMANCE_STATUS_MACROS_H_

// Early-return helpers for functions that return absl::Status or
// absl::StatusOr<T>, local to the conformance suite.

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the status of `expr` from the enclosing function unless it is OK.
#define CONF_RETURN_IF_ERROR(expr)                                \
  do {                                                            \
    if (absl::Status conf_status_ = (expr); !conf_status_.ok()) { \
      return conf_status_;                                        \
    }                                                             \
  } while (false)

// Evaluates `expr` (an absl::StatusOr<T>); returns its status from the
// enclosing function unless it is OK, else assigns its value to `lhs` (a
// declaration or an lvalue).
#define CONF_ASSIGN_OR_RETURN(lhs, expr) \
  CONF_ASSIGN_OR_RETURN_IMPL_(CONF_CONCAT_(conf_statusor_, __LINE__), lhs, expr)

#define CONF_CONCAT_INNER_(a, b) a##b
#define CONF_CONCAT_(a, b) CONF_CONCAT_INNER_(a, b)
#define CONF_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)   \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // TESSERA_TESTS_CONFORMANCE_STATUS_MACROS_H_
