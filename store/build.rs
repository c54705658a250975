//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds the
//! `migrations/` files at compile time, and cargo does not otherwise watch them.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
