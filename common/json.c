#include "json.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

struct parser {
    const char *p;
    int depth;
};

static void skip(struct parser *ps)
{
    while (isspace((unsigned char)*ps->p))
        ps->p++;
}

static struct json *value(struct parser *ps);

static char *string(struct parser *ps)
{
    if (*ps->p != '"')
        return NULL;
    ps->p++;
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    while (s && *ps->p && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            c = *ps->p++;
            switch (c) {
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'r':
                c = '\r';
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    if (!isxdigit((unsigned char)*ps->p)) {
                        free(s);
                        return NULL;
                    }
                    char h = *ps->p++;
                    v = v * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
                }
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            case '"':
            case '\\':
            case '/':
                break;
            default:
                free(s);
                return NULL;
            }
        }
        if (len + 2 > cap) {
            cap *= 2;
            char *n = realloc(s, cap);
            if (!n) {
                free(s);
                return NULL;
            }
            s = n;
        }
        s[len++] = c;
    }
    if (!s || *ps->p != '"') {
        free(s);
        return NULL;
    }
    ps->p++;
    s[len] = '\0';
    return s;
}

static struct json *node(enum json_type t)
{
    struct json *j = calloc(1, sizeof *j);
    if (j)
        j->type = t;
    return j;
}

static struct json *container(struct parser *ps, bool object)
{
    struct json *j = node(object ? JSON_OBJECT : JSON_ARRAY);
    if (!j || ++ps->depth > 64) {
        json_free(j);
        return NULL;
    }
    ps->p++;
    skip(ps);
    struct json **tail = &j->child;
    if (*ps->p == (object ? '}' : ']')) {
        ps->p++;
        ps->depth--;
        return j;
    }
    for (;;) {
        char *key = NULL;
        skip(ps);
        if (object) {
            key = string(ps);
            skip(ps);
            if (!key || *ps->p != ':') {
                free(key);
                json_free(j);
                return NULL;
            }
            ps->p++;
        }
        struct json *v = value(ps);
        if (!v) {
            free(key);
            json_free(j);
            return NULL;
        }
        v->key = key;
        *tail = v;
        tail = &v->next;
        skip(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == (object ? '}' : ']')) {
            ps->p++;
            ps->depth--;
            return j;
        }
        json_free(j);
        return NULL;
    }
}

static struct json *value(struct parser *ps)
{
    skip(ps);
    const char *p = ps->p;
    if (*p == '{' || *p == '[')
        return container(ps, *p == '{');
    if (*p == '"') {
        struct json *j = node(JSON_STRING);
        if (j && !(j->string = string(ps))) {
            free(j);
            return NULL;
        }
        return j;
    }
    if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
        struct json *j = node(JSON_BOOL);
        if (j)
            j->boolean = p[0] == 't';
        ps->p += p[0] == 't' ? 4 : 5;
        return j;
    }
    if (strncmp(p, "null", 4) == 0) {
        ps->p += 4;
        return node(JSON_NULL);
    }
    char *end;
    double d = strtod(p, &end);
    if (end == p)
        return NULL;
    ps->p = end;
    struct json *j = node(JSON_NUMBER);
    if (j)
        j->number = d;
    return j;
}

struct json *json_parse(const char *text)
{
    if (!text)
        return NULL;
    struct parser ps = {text, 0};
    struct json *j = value(&ps);
    skip(&ps);
    if (j && *ps.p) {
        json_free(j);
        return NULL;
    }
    return j;
}

void json_free(struct json *j)
{
    while (j) {
        struct json *next = j->next;
        json_free(j->child);
        free(j->string);
        free(j->key);
        free(j);
        j = next;
    }
}

const struct json *json_get(const struct json *j, const char *key)
{
    if (!j || j->type != JSON_OBJECT)
        return NULL;
    for (const struct json *c = j->child; c; c = c->next)
        if (c->key && strcmp(c->key, key) == 0)
            return c;
    return NULL;
}

const struct json *json_path(const struct json *j, const char *path)
{
    char part[128];
    while (j && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof part)
            return NULL;
        memcpy(part, path, n);
        part[n] = '\0';
        j = json_get(j, part);
        path += n + (path[n] == '.');
    }
    return j;
}

double json_number(const struct json *j, double fallback) { return j && j->type == JSON_NUMBER ? j->number : fallback; }

const char *json_string(const struct json *j, const char *fallback)
{
    return j && j->type == JSON_STRING ? j->string : fallback;
}

size_t json_length(const struct json *j)
{
    size_t n = 0;
    for (const struct json *c = j ? j->child : NULL; c; c = c->next)
        n++;
    return n;
}

bool json_bool(const struct json *j, bool fallback)
{
    return j && j->type == JSON_BOOL ? j->boolean : fallback;
}
