//! From a skill's requests and the user's policy to the grants and limits
//! of one call. Only the user's policy can widen what a call gets: a skill
//! *requests* grants and limits, the user *gives* them.
//!
//! - `grants.rs`: the user's grants, and what a call of a skill gets;
//! - `limits.rs`: ceilings on what a manifest may request, the user's
//!   overrides, and a call's limits;
//! - `programs.rs`: the host programs a skill's scripts may start;
//! - `user_grants.rs`: what the user gives one skill, kept with the user
//!   (`grants.yaml`, `skillbox grant`, `--grant`);
//! - `startup.rs`: the checks of the policy against the catalog and the
//!   host's own state, before anything runs.

mod grants;
mod limits;
mod programs;
mod startup;
mod user_grants;

pub use grants::{EnvGrant, NetGrant, Resolved, UserPolicy, bare_grants, grants, requested};
pub use limits::{Ceilings, LimitOverrides, apply_requests, limits};
pub use programs::resolve as resolve_program;
pub use startup::{
    HostState, PolicyError, check_env_grants, check_net_grants, check_skill_grants,
    check_write_grant,
};
pub use user_grants::{GRANTS_FILE, GrantFlag, GrantsError, SkillGrant, UserGrants};
