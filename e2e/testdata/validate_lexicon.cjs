// Validates recorded getFeed exchanges against Lexicon documents with the
// reference implementation, @atproto/lexicon (found through NODE_PATH).
//
//   node validate_lexicon.cjs CASES.json
//
// CASES.json: {"lexicons": [doc, …], "nsid": "…getFeed",
//              "cases": [{"params": {…}, "output": {…}}, …]}
// Prints one line per problem and exits 1 if there are any.
'use strict';
const fs = require('fs');
const { Lexicons } = require('@atproto/lexicon');

const input = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const lex = new Lexicons();
for (const doc of input.lexicons) lex.add(doc); // validates the document itself

// The reference validator accepts properties an object does not declare;
// a field the server adds without documenting it is drift too.
function undeclared(value, def, path, problems) {
  if (def.type === 'ref') {
    return undeclared(value, lex.getDefOrThrow(def.ref.startsWith('#') ? input.nsid + def.ref : def.ref), path, problems);
  }
  if (def.type === 'array') {
    value.forEach((v, i) => undeclared(v, def.items, `${path}[${i}]`, problems));
    return;
  }
  if (def.type !== 'object') return;
  for (const key of Object.keys(value)) {
    if (!(key in def.properties)) problems.push(`${path}: field ${key} is not in the Lexicon`);
    else undeclared(value[key], def.properties[key], `${path}.${key}`, problems);
  }
}

const main = lex.getDefOrThrow(input.nsid);
const problems = [];
input.cases.forEach((c, i) => {
  try {
    lex.assertValidXrpcParams(input.nsid, c.params);
  } catch (e) {
    problems.push(`case ${i} params: ${e.message}`);
  }
  try {
    lex.assertValidXrpcOutput(input.nsid, c.output);
  } catch (e) {
    problems.push(`case ${i} output: ${e.message}`);
  }
  undeclared(c.output, main.output.schema, `case ${i} output`, problems);
});
for (const p of problems) console.log(p);
console.log(`${input.cases.length} responses checked against ${input.nsid}, ${problems.length} problems`);
process.exit(problems.length ? 1 : 0);
