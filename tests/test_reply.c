/* test_reply.c - what probe, canary and ctxwalk read from a server
 * (src/prod/target.c): the x-request-id header line as curl hands it over
 * (n bytes, not NUL-terminated) and the body of a completion, a chat
 * completion, an error and a 200 that is not a completion. */
#include "check.h"
#include "prod/target.h"

#include <string.h>

static void body(bt_reply *r, int status, const char *json)
{
    memset(r, 0, sizeof *r);
    r->http_status = status;
    bt_reply_parse(r, json, strlen(json));
}

int main(void)
{
    bt_reply r;
    memset(&r, 0, sizeof r);
    const char ok[] = "X-Request-Id: req-42\r\n";
    bt_reply_header(&r, ok, sizeof ok - 1);
    CHECK(!strcmp(r.request_id, "req-42"), "'%s'", r.request_id);
    /* a value of nothing but spaces, the line's n bytes followed by other
     * bytes: the spaces end at n (fuzz_reply: the scan ran past the line
     * and copied what followed, here "junk") */
    memset(&r, 0, sizeof r);
    const char spaces[] = "x-request-id:     junk";
    bt_reply_header(&r, spaces, 16);
    CHECK(r.request_id[0] == 0, "request id '%s' from past the line", r.request_id);
    memset(&r, 0, sizeof r);
    bt_reply_header(&r, "Content-Type: application/json\r\n", 32);
    CHECK(r.request_id[0] == 0);

    body(&r, 200, "{\"choices\":[{\"text\":\"Paris\",\"finish_reason\":\"stop\"}]}");
    CHECK(r.http_status == 200 && r.text && !strcmp(r.text, "Paris") && r.text_len == 5 && !strcmp(r.finish, "stop"));
    bt_reply_clear(&r);
    body(&r, 200, "{\"choices\":[{\"message\":{\"content\":\"four\"},\"finish_reason\":\"length\"}],"
                  "\"bangtrace\":{\"completion_ids\":[7,8],\"n_vocab\":512}}");
    CHECK(r.text && !strcmp(r.text, "four") && r.n_ids == 2 && r.ids[1] == 8 && r.n_vocab == 512);
    bt_reply_clear(&r);
    body(&r, 500, "{\"error\":{\"message\":\"boom\"}}");
    CHECK(r.http_status == 500 && !r.text && !strcmp(r.error, "HTTP 500: boom"), "'%s'", r.error);
    bt_reply_clear(&r);
    body(&r, 200, "{\"object\":\"list\"}");
    CHECK(r.http_status == 0 && !r.text && strstr(r.error, "not a completion"), "'%s'", r.error);
    bt_reply_clear(&r);
    body(&r, 200, "not json at all");
    CHECK(r.http_status == 0 && !r.text);
    bt_reply_clear(&r);
    printf("test_reply: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
