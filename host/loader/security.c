#include "loader.h"

#include "core/err.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static lh_status check_mode_owner(const char *what, const char *path, const struct stat *st,
                                  lh_err *err)
{
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return lh_err_set(err, LH_E_INSECURE,
                          "%s %s is %s-writable (mode %04o): anyone in that %s could replace "
                          "the code llmhost runs; fix with chmod go-w",
                          what, path, (st->st_mode & S_IWOTH) ? "world" : "group",
                          (unsigned)(st->st_mode & 07777),
                          (st->st_mode & S_IWOTH) ? "system" : "group");
    uid_t me = geteuid();
    if (st->st_uid != 0 && st->st_uid != me)
        return lh_err_set(err, LH_E_INSECURE,
                          "%s %s is owned by uid %u, neither root nor the current user "
                          "(uid %u)",
                          what, path, (unsigned)st->st_uid, (unsigned)me);
    return LH_OK;
}

lh_status lh_security_check_file(const char *path, lh_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return lh_err_set(err, errno == ENOENT ? LH_E_MODULE_MISSING : LH_E_IO, "%s: %s", path,
                          strerror(errno));
    if (!S_ISREG(st.st_mode))
        return lh_err_set(err, LH_E_LOAD, "%s: not a regular file", path);
    return check_mode_owner("plugin file", path, &st, err);
}

lh_status lh_security_check_dir(const char *path, lh_err *err)
{
    if (path[0] != '/')
        return lh_err_set(err, LH_E_INSECURE,
                          "custom module dir '%s' is relative; custom dirs must be absolute "
                          "paths, so that what loads cannot depend on the working directory",
                          path);
    struct stat st;
    if (stat(path, &st) != 0)
        return lh_err_set(err, LH_E_IO, "custom module dir %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return lh_err_set(err, LH_E_IO, "custom module dir %s: not a directory", path);
    return check_mode_owner("custom module dir", path, &st, err);
}
