/*
 * A claim: a slice reserved for a container before the container exists,
 * which the container's create hook takes over instead of admitting it a
 * second time. gpuslice-nomad-device reserves one when Nomad's client
 * calls its Reserve (`gpuslice-hook admit --id claim-<token> ...`) and puts
 * the token in the task's env (GPUSLICE_CLAIM); the container's hook finds
 * the row by it and renames it to the container, in one transaction.
 *
 * The env is the tenant's, so a token proves only that whoever started the
 * container was given it: 128 random bits nobody else can guess, spent by
 * the first takeover, and good only for a row reserved with exactly the
 * container's request (device, card, memory, cores, priority) on a card in
 * service. What it can gain is a slice that was reserved for it anyway.
 */
#ifndef GS_CLAIM_H
#define GS_CLAIM_H

#include <stddef.h>

#include "accountant.h"
#include "gpuslice/claim.h"
#include "json.h"

/* The token of process.env's last GPUSLICE_CLAIM= entry (the one the process
 * gets): GS_OK and *out
 * (malloc'ed, or NULL when there is none); GS_ERROR with the line when it
 * is not GPUSLICE_CLAIM_TOKEN_LEN lowercase hex digits. process: the config's
 * process object, NULL when there is none. */
int gs_claim_from_env(const struct gs_json *process, char **out);

/* Take over the row "claim-<SHA-256 of token>" that matches reqs[0] (a slice: a whole
 * card is never claimed) for reqs[0].container_id: its pid, pid_start,
 * runtime and name become the container's, and a `claim` event records it
 * ({"claim": "claim-<hash>", "device": ..., "taken": true}). *taken: 1 if
 * it was, else 0 and nothing was written (no such row, another request,
 * its card out of service: the caller admits as usual). *first: the
 * container held nothing before. One BEGIN IMMEDIATE transaction. */
int gs_claim_take(struct gs_acct *a, const char *token, const struct gs_request *reqs, size_t n,
                  int *taken, int *first);

/* After an admission of a container that showed a claim with no row left
 * to take (spent by an earlier container of the same task, reclaimed), the
 * `claim` event {"claim": ..., "device": ..., "taken": false}: the plugin
 * learns which container now serves the task. */
int gs_claim_note(struct gs_acct *a, const char *token, const struct gs_reservation *held);

#endif
