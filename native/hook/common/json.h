/*
 * A small validating JSON parser (RFC 8259) for the OCI state and the
 * bundle's config.json, both written by whoever built the container.
 *
 * gs_json_parse() checks the whole text once: UTF-8, syntax, nesting depth,
 * nothing after the value. It builds no tree (a tree would cost memory in
 * proportion to a hostile input); a value is a span of the checked text, and
 * members are found by scanning that span again. Errors read as Python's
 * json module writes them ("Expecting value: line 1 column 1 (char 0)"),
 * since the hook's messages were Python's.
 */
#ifndef GS_JSON_H
#define GS_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define GS_JSON_MAX_DEPTH 64
#define GS_JSON_DEPTH_TEXT "64" /* the same, for messages */

enum gs_json_type {
    GS_JSON_NULL,
    GS_JSON_FALSE,
    GS_JSON_TRUE,
    GS_JSON_NUMBER,
    GS_JSON_STRING,
    GS_JSON_ARRAY,
    GS_JSON_OBJECT,
};

/* One value: its text inside a document that gs_json_parse accepted. */
struct gs_json {
    const char *p;
    size_t len;
    enum gs_json_type type;
};

/* 0 and *root, or -1 with the reason appended to err. text needs no NUL. */
int gs_json_parse(const char *text, size_t len, struct gs_json *root, struct gs_str *err);

/* The member key of an object (the last one if repeated, as Python keeps);
 * 1 if found, 0 if absent or obj is not an object. key: at most 63 bytes. */
int gs_json_member(const struct gs_json *obj, const char *key, struct gs_json *out);

/* Walk an array's elements or an object's members: start with *cursor = 0.
 * 1 while there is one more (*key set for an object; key may be NULL), 0 at
 * the end or when c is neither. */
int gs_json_next(const struct gs_json *c, size_t *cursor, struct gs_json *key,
                 struct gs_json *value);

/* A dotted path of members, "process.user.uid"; 1 if every step is found. */
int gs_json_path(const struct gs_json *root, const char *path, struct gs_json *out);

/* The decoded string (malloc'ed, NUL-terminated; may hold NUL bytes: see
 * *len). Lone surrogates are kept, 3 bytes each, as Python keeps them. */
char *gs_json_string(const struct gs_json *v, size_t *len);

/* The same without an allocation: the first cap bytes of the decoded string
 * into out (no NUL added); returns the whole decoded length, which may be
 * more than cap. 0 if v is not a string. For prefix tests on hot paths. */
size_t gs_json_string_into(const struct gs_json *v, char *out, size_t cap);

/* An integer literal (no fraction, no exponent: Python's int) in *out.
 * 1: it fits int64; 0: an integer too large for int64; -1: not an integer. */
int gs_json_int64(const struct gs_json *v, int64_t *out);

/* Python's bool() of the value: null, false, 0, 0.0, "", [] and {} are false. */
int gs_json_truthy(const struct gs_json *v);

#endif
