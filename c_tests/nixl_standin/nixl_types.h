/*
 * Test stand-in for NIXL's public nixl_types.h, written for these tests from NIXL's documented
 * interface (not a copy): the same include guard and the names that matter to a translation
 * unit that also includes nixl-telemetry's headers, notably nixl_status_t and NIXL's
 * `using nixl_telemetry_plugin_t = std::string;`, which our plug-in header used to clash with.
 */
#ifndef _NIXL_TYPES_H
#define _NIXL_TYPES_H

#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

enum nixl_mem_t { DRAM_SEG, VRAM_SEG, BLK_SEG, OBJ_SEG, FILE_SEG };

enum nixl_xfer_op_t { NIXL_READ, NIXL_WRITE };

enum nixl_status_t {
    NIXL_IN_PROG = 1,
    NIXL_SUCCESS = 0,
    NIXL_ERR_NOT_POSTED = -1,
    NIXL_ERR_INVALID_PARAM = -2,
    NIXL_ERR_BACKEND = -3,
    NIXL_ERR_NOT_FOUND = -4,
    NIXL_ERR_MISMATCH = -5,
    NIXL_ERR_NOT_ALLOWED = -6,
    NIXL_ERR_REPOST_ACTIVE = -7,
    NIXL_ERR_UNKNOWN = -8,
    NIXL_ERR_NOT_SUPPORTED = -9,
    NIXL_ERR_REMOTE_DISCONNECT = -10,
    NIXL_ERR_CANCELED = -11,
    NIXL_ERR_NO_TELEMETRY = -12
};

using nixl_backend_t = std::string;
using nixl_telemetry_plugin_t = std::string;
using nixl_blob_t = std::string;
using nixl_mem_list_t = std::vector<nixl_mem_t>;
using nixl_b_params_t = std::unordered_map<std::string, std::string>;
using nixl_notifs_t = std::unordered_map<std::string, std::vector<nixl_blob_t>>;
using nixl_query_resp_t = std::optional<nixl_b_params_t>;
using chrono_point_t = std::chrono::steady_clock::time_point;
using chrono_period_us_t = std::chrono::microseconds;

struct nixlXferTelemetry {
    chrono_point_t startTime;
    chrono_period_us_t postDuration;
    chrono_period_us_t xferDuration;
    size_t totalBytes;
    size_t descCount;
};

using nixl_xfer_telem_t = nixlXferTelemetry;

#define NIXL_INIT_AGENT ""

#endif
