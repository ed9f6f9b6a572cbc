/*
 * JSON in and out, for text that whoever built a container wrote: the OCI
 * state and the bundle's config.json (the fake driver's GPU description
 * too). Three things, each done in one place:
 *
 * - gs_json_parse() checks a whole document once (UTF-8, syntax, nesting
 *   depth, nothing after the value) and builds no tree: a tree would cost
 *   memory in proportion to a hostile input. A value is a span of the
 *   checked text; members are found by scanning that span again. An error
 *   says what was expected and where: "expected ',' or '}' at line 3,
 *   column 9 (byte offset 41)".
 * - gs_json_quote() is the one JSON string writer (event details, the
 *   runtime's log lines).
 * - gs_quote() is how a message names a value, always on one line.
 */
#ifndef GS_JSON_H
#define GS_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define GS_JSON_MAX_DEPTH 64
#define GS_JSON_DEPTH_TEXT "64" /* the same, for messages */

enum gs_json_type {
    GS_JSON_NONE, /* no value: the key of an array element; a zeroed struct gs_json */
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

/* The member key of an object (the last one if repeated, as Go's decoder,
 * runc's, keeps it); 1 if found, 0 if absent or obj is not an object.
 * key: at most 63 bytes. */
int gs_json_member(const struct gs_json *obj, const char *key, struct gs_json *out);

/* Walk an array's elements or an object's members: start with *cursor = 0.
 * 1 while there is one more: *value set, and *key (unless key is NULL) set
 * to the member's name, or to GS_JSON_NONE for an array's element. 0 at
 * the end, or when c is neither an array nor an object. */
int gs_json_next(const struct gs_json *c, size_t *cursor, struct gs_json *key,
                 struct gs_json *value);

/* The decoded string (malloc'ed, NUL-terminated; may hold NUL bytes: see
 * *len). A \u escape of a lone surrogate decodes to U+FFFD, as Go's
 * decoder (runc's) has it. NULL if v is not a string. */
char *gs_json_string(const struct gs_json *v, size_t *len);

/* The same without an allocation: the first cap bytes of the decoded string
 * into out (no NUL added); returns the whole decoded length, which may be
 * more than cap. 0 if v is not a string. For prefix tests on hot paths. */
size_t gs_json_string_into(const struct gs_json *v, char *out, size_t cap);

/* An integer literal (no fraction, no exponent) in *out. 1: it fits
 * int64; 0: an integer too large for int64; -1: not an integer. */
int gs_json_int64(const struct gs_json *v, int64_t *out);

/* The one JSON string writer: s[0..n) between double quotes, '"', '\\',
 * what gpuslice/text.h bars (controls, U+2028, U+2029, bidi and invisible
 * format characters) escaped; other
 * UTF-8 as it is; a byte that is not UTF-8 as \ufffd. */
void gs_json_quote(struct gs_str *b, const char *s, size_t n);

/* The length of the UTF-8 sequence at s[0..n), or 0 if none starts there
 * (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
 * *cp: its code point. */
size_t gs_utf8_at(const unsigned char *s, size_t n, unsigned *cp);

/* At most this many bytes of a value in a message, then "...". */
#define GS_QUOTE_MAX 256

enum gs_quote_as {
    GS_AS_STRING, /* bytes (a command-line value, a decoded string): "a\"b\n" */
    GS_AS_JSON,   /* a span of checked JSON input, as it was written: {"a": 1} */
    GS_AS_PATH,   /* a path, or any text that frames a message: all of it */
};

/*
 * How a message names a value, on one line whatever the value holds: what
 * gpuslice/text.h bars (controls, line and paragraph separators, bidi and
 * invisible format characters) escaped as in a JSON string (\n, \u0085,
 * \u202e), a byte that is not UTF-8 as \xNN. A string is put
 * between double quotes with '"' and '\\' escaped; JSON text and a path
 * keep theirs. A string or JSON text is cut after GS_QUOTE_MAX bytes
 * (at a character, "..." added); a path never is.
 */
void gs_quote(struct gs_str *b, const char *s, size_t n, enum gs_quote_as as);

/* gs_quote into a fresh malloc'ed string, for a message's arguments. */
char *gs_quoted(const char *s, size_t n, enum gs_quote_as as);

#endif
