/*
 * The one rule for text a tenant chooses (a container's name from its
 * annotations, any value a message quotes) where it reaches a terminal or a
 * label: the code points below are never shown as they are. They are the
 * controls (C0, DEL, C1 with the 8-bit CSI U+009B), the soft hyphen, the
 * bidirectional marks, embeddings, overrides and isolates (U+061C,
 * U+200E-U+200F, U+202A-U+202E, U+2066-U+2069), the zero-width and other
 * invisible format characters (U+180E, U+200B-U+200D, U+2060-U+2065,
 * U+206A-U+206F, U+FEFF, U+FFF9-U+FFFB, the tags U+E0000-U+E007F), the
 * line and paragraph separators (U+2028, U+2029) and the surrogates (which
 * only a broken decoder yields). Text that is not UTF-8 is barred byte by
 * byte. Where text is stored or shown (the hook's names, `gpuslice status`,
 * `top`, the exporter's labels) each barred code point or byte becomes a
 * space; a message escapes it (\uXXXX, \xNN) instead.
 *
 * The ranges, hex, inclusive, space-separated: read by the hook
 * (native/hook/common/text.c) and by ocihook/tenant_text.py, so the two
 * cannot differ.
 */
#ifndef GPUSLICE_TEXT_H
#define GPUSLICE_TEXT_H

#define GPUSLICE_TEXT_BARRED "0-1f 7f-9f ad 61c 180e 200b-200f 2028-202e 2060-206f d800-dfff feff fff9-fffb e0000-e007f"

#endif
