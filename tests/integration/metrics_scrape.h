#ifndef TESSERA_TESTS_INTEGRATION_METRICS_SCRAPE_H_
#define TESSERA_TESTS_INTEGRATION_METRICS_SCRAPE_H_

// Reading a daemon's Prometheus metrics over HTTP in integration tests.

#include <map>
#include <string>

namespace tessera::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (for
// --metrics_listen).
int FreePort();

// The body curl fetches from `url` (empty when it fetches nothing).
std::string Curl(const std::string& url);

// GET http://127.0.0.1:PORT/metrics, parsed as Prometheus text: every line
// a comment or `name{labels} value` (a line that is neither fails the
// test). Returns value by series, the series written as on the page.
std::map<std::string, double> Scrape(int port);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_INTEGRATION_METRICS_SCRAPE_H_
