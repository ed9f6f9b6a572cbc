/*
 * Text as Python writes it. The hook's messages were Python f-strings with
 * !r (repr) of values from the JSON a container author wrote, and its event
 * rows hold json.dumps(detail, sort_keys=True); the C hook writes the same.
 */
#ifndef GS_PYFMT_H
#define GS_PYFMT_H

#include <stddef.h>

#include "json.h"
#include "util.h"

/* At most this many bytes of a repr() in a message, then "...". */
#define GS_REPR_LIMIT 1024

/* repr() of the value json.loads would make of v: 'text', 12, 1.5, True,
 * None, [1, 2], {'a': 1}. */
void gs_py_repr(struct gs_str *b, const struct gs_json *v);

/* repr() of a str given as bytes: UTF-8; a byte that is not shows as
 * \udcXX (surrogateescape, as Python decodes argv). */
void gs_py_repr_bytes(struct gs_str *b, const char *s, size_t n);

/* A JSON string as json.dumps writes it (ensure_ascii: \u00e9, "\n"). */
void gs_json_quote(struct gs_str *b, const char *s);

#endif
