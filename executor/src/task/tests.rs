//! Tests of what a task inherits from the executor's environment.

use super::inherited;

#[test]
fn tasks_inherit_what_programs_need_and_no_credentials() {
    for name in [
        "PATH",
        "HOME",
        "LC_ALL",
        "NVIDIA_VISIBLE_DEVICES",
        "https_proxy",
        "DROVER_LOG",
    ] {
        assert!(inherited(name), "{name}");
    }
    for name in [
        "DROVER_ENROLLMENT_TOKEN",
        "DROVER_TOKEN",
        "DROVER_ADMIN_TOKEN",
        "DROVER_SECRET_KEY",
        "DROVER_DATABASE_URL",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        assert!(!inherited(name), "{name}");
    }
}
