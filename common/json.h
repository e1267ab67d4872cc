/* A small JSON reader for what vgpud's control plane answers: parse text into a tree, then look
 * values up by key. Enough for tools and tests; not a general-purpose library (no \u escapes
 * beyond ASCII, numbers as double). */
#ifndef VGPU_JSON_H
#define VGPU_JSON_H

#include <stdbool.h>
#include <stddef.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json {
    enum json_type type;
    bool boolean;
    double number;
    char *string;        /* JSON_STRING: the value; in an object: also each member's key */
    char *key;           /* the member's key, when the value sits in an object */
    struct json *child;  /* first element or member */
    struct json *next;   /* next sibling */
};

/* Parse text; NULL if it is not valid JSON (or memory ran out). */
struct json *json_parse(const char *text);
void json_free(struct json *j);
/* The member of an object with this key, NULL if absent or j is not an object. */
const struct json *json_get(const struct json *j, const char *key);
/* Follow a path of keys separated by '.', e.g. "totals.sessions". */
const struct json *json_path(const struct json *j, const char *path);
/* A number (or the fallback when j is NULL or not a number). */
double json_number(const struct json *j, double fallback);
const char *json_string(const struct json *j, const char *fallback);
bool json_bool(const struct json *j, bool fallback);
size_t json_length(const struct json *j); /* elements of an array or members of an object */

#endif
