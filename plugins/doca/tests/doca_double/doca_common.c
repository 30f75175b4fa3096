/*
 * Test double of NVIDIA's libdoca_common: the error-name functions the DOCA exporter plug-in
 * resolves from it. Built by the tests as libdoca_common.so (soname libdoca_common.so).
 */
#include "doca_double.h"

const char *doca_error_get_name(doca_error_t error)
{
    switch (error) {
    case DOCA_SUCCESS:
        return "DOCA_SUCCESS";
    case DOCA_ERROR_UNKNOWN:
        return "DOCA_ERROR_UNKNOWN";
    case DOCA_ERROR_INVALID_VALUE:
        return "DOCA_ERROR_INVALID_VALUE";
    case DOCA_ERROR_INITIALIZATION:
        return "DOCA_ERROR_INITIALIZATION";
    case DOCA_ERROR_NOT_CONNECTED:
        return "DOCA_ERROR_NOT_CONNECTED";
    case DOCA_ERROR_BAD_STATE:
        return "DOCA_ERROR_BAD_STATE";
    }
    return "DOCA_ERROR_(other)";
}

const char *doca_error_get_descr(doca_error_t error)
{
    return error == DOCA_SUCCESS ? "success" : "failure reported by the DOCA test double";
}
