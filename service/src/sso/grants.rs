//! Which tenants and roles a provider's groups give (`--oidc-group-map GROUP=TENANT:ROLE`, and the
//! group whose members are cluster administrators): a pure function of the mapping and the groups an
//! ID token carries, so sign-in, refresh and the CLI's exchange decide the same.

use drover_core::Role;

/// One line of the mapping: members of `group` are users of `tenant` with `role`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRule {
    pub group: String,
    pub tenant: String,
    pub role: Role,
}

impl std::str::FromStr for GroupRule {
    type Err = String;

    /// `GROUP=TENANT:ROLE`; the group may itself contain `=` or `:` only before the last `=`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (group, grant) = text
            .rsplit_once('=')
            .ok_or_else(|| format!("`{text}` is not GROUP=TENANT:ROLE"))?;
        let (tenant, role) = grant
            .split_once(':')
            .ok_or_else(|| format!("`{text}` is not GROUP=TENANT:ROLE (no `:ROLE`)"))?;
        if group.trim().is_empty() || tenant.trim().is_empty() {
            return Err(format!(
                "`{text}` is not GROUP=TENANT:ROLE (empty group or tenant)"
            ));
        }
        Ok(GroupRule {
            group: group.trim().to_owned(),
            tenant: tenant.trim().to_owned(),
            role: role.trim().parse()?,
        })
    }
}

/// What a member of some groups is in Drover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub tenant: String,
    pub role: Role,
}

/// Authority of a role, to keep the strongest when two groups map to one tenant.
fn rank(role: Role) -> u8 {
    match role {
        Role::Admin => 2,
        Role::Member => 1,
        Role::Viewer => 0,
    }
}

/// The tenants `groups` give, each once with the strongest role any of the groups gives there, in
/// the order the mapping first names them (the first is where a dashboard sign-in lands).
pub fn grants(rules: &[GroupRule], groups: &[String]) -> Vec<Grant> {
    let mut out: Vec<Grant> = Vec::new();
    for rule in rules.iter().filter(|rule| groups.contains(&rule.group)) {
        match out.iter_mut().find(|grant| grant.tenant == rule.tenant) {
            Some(grant) if rank(rule.role) > rank(grant.role) => grant.role = rule.role,
            Some(_) => {}
            None => out.push(Grant {
                tenant: rule.tenant.clone(),
                role: rule.role,
            }),
        }
    }
    out
}

/// The groups in a claim's value: an array of strings, or one string (some providers send a lone
/// group so); anything else is none.
pub fn groups_of(value: Option<&serde_json::Value>) -> Vec<String> {
    match value {
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(|item| item.as_str().map(str::to_owned))
            .collect(),
        Some(serde_json::Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(lines: &[&str]) -> Vec<GroupRule> {
        lines.iter().map(|line| line.parse().unwrap()).collect()
    }

    #[test]
    fn a_rule_reads_group_tenant_and_role() {
        let rule: GroupRule = "ml-team=vision:member".parse().unwrap();
        assert_eq!(rule.group, "ml-team");
        assert_eq!(rule.tenant, "vision");
        assert_eq!(rule.role, Role::Member);
        // A group name may hold `=` (LDAP DNs do); the last `=` splits.
        let dn: GroupRule = "cn=ml,ou=groups=vision:viewer".parse().unwrap();
        assert_eq!(dn.group, "cn=ml,ou=groups");
        for bad in [
            "ml",
            "ml=vision",
            "=vision:member",
            "ml=:member",
            "ml=vision:owner",
        ] {
            assert!(bad.parse::<GroupRule>().is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn each_tenant_once_with_the_strongest_role_in_mapping_order() {
        let map = rules(&[
            "readers=vision:viewer",
            "speech=speech:member",
            "vision-admins=vision:admin",
        ]);
        let groups = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let got = grants(&map, &groups(&["vision-admins", "readers", "speech"]));
        assert_eq!(
            got,
            vec![
                Grant {
                    tenant: "vision".into(),
                    role: Role::Admin
                },
                Grant {
                    tenant: "speech".into(),
                    role: Role::Member
                },
            ]
        );
        assert_eq!(grants(&map, &groups(&["speech"]))[0].tenant, "speech");
        assert!(grants(&map, &groups(&["unmapped"])).is_empty());
        assert!(grants(&map, &[]).is_empty());
    }

    #[test]
    fn groups_come_as_an_array_or_one_string() {
        let array = serde_json::json!(["a", "b", 3]);
        assert_eq!(groups_of(Some(&array)), vec!["a", "b"]);
        assert_eq!(groups_of(Some(&serde_json::json!("a"))), vec!["a"]);
        assert!(groups_of(Some(&serde_json::json!({"a": 1}))).is_empty());
        assert!(groups_of(None).is_empty());
    }
}
