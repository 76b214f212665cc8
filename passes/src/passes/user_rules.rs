//! `user-rules`: applies the rules loaded from the user's rules file
//! (`aoc opt --rules FILE`, loaded with `load_rules`) through the e-graph.

use super::{LIMIT_OPTIONS, run_rules, set_limit};
use crate::egraph::Limits;
use crate::pass::{Pass, PassContext, PassDef, PassOptions, PassStats};
use aoc_ir::{Diagnostic, Module};

#[derive(Default, Debug, Clone)]
pub struct UserRulesOptions {
    pub limits: Limits,
}

impl PassOptions for UserRulesOptions {
    const SPEC: &'static [crate::pass::OptionSpec] = LIMIT_OPTIONS;
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        set_limit(&mut self.limits, key, value)
    }
}

pub struct UserRules {
    options: UserRulesOptions,
}

impl PassDef for UserRules {
    const NAME: &'static str = "user-rules";
    const SUMMARY: &'static str = "apply the rewrite rules of the --rules file";
    type Options = UserRulesOptions;
    fn new(options: UserRulesOptions) -> Self {
        UserRules { options }
    }
}

impl Pass for UserRules {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn summary(&self) -> &'static str {
        Self::SUMMARY
    }
    fn run(&mut self, module: &mut Module, cx: &mut PassContext) -> Result<PassStats, Diagnostic> {
        if cx.user_rules.is_empty() {
            return Ok(PassStats {
                notes: vec!["no user rules loaded (use --rules FILE)".to_string()],
                ..PassStats::default()
            });
        }
        let rules = cx.user_rules;
        run_rules(module, rules, &self.options.limits, cx)
    }
}
