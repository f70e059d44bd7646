import { escapeHtml, html, joinHtml, labelCells, SafeHtml } from '../../../src/http/console/html';
import { squash } from '../../helpers/console-client';

/** The console's one escaping rule, against hostile strings. */

describe('escapeHtml', () => {
  it.each([
    ['plain text', 'plain text'],
    ['<script>alert(1)</script>', '&lt;script&gt;alert(1)&lt;/script&gt;'],
    ['"><img src=x onerror=alert(1)>', '&quot;&gt;&lt;img src=x onerror=alert(1)&gt;'],
    ["' onmouseover='x", '&#39; onmouseover=&#39;x'],
    ['`${x}`', '&#96;${x}&#96;'],
    ['a & b &amp; c', 'a &amp; b &amp;amp; c'],
    ['nul\u0000bell\u0007del\u007f', 'nul\ufffdbell\ufffddel\ufffd'],
    ['tab\tnewline\ncr\r', 'tab\tnewline\ncr\r'],
    ['averbação ✓ 😀', 'averbação ✓ 😀'],
  ])('%j → %j', (input, expected) => {
    expect(escapeHtml(input)).toBe(expected);
  });
});

describe('html tag', () => {
  it('escapes every interpolated value, keeps nested markup, flattens lists and drops nothing-values', () => {
    const inner = html`<b>${'<i>'}</b>`;
    const out = html`<p title="${'"x"'}">
      ${inner}${['<', html`<br />`, 3]}${null}${undefined}${false}${0}
    </p>`;
    expect(squash(out.value)).toBe('<p title="&quot;x&quot;"><b>&lt;i&gt;</b>&lt;<br>30</p>');
  });

  it('cannot be forged: SafeHtml is made by the tag only', () => {
    expect(() => new SafeHtml(Symbol('SafeHtml') as never, '<script>')).toThrow(TypeError);
    expect(html`${{ value: '<script>' } as unknown as string}`.value).toBe('[object Object]');
  });

  it('joins with an escaped separator', () => {
    expect(joinHtml([html`<a></a>`, '<b>'], ' & ').value).toBe('<a></a> &amp; &lt;b&gt;');
  });
});

describe('labelCells (the phone card layout)', () => {
  it("gives each cell its column's heading, escaped, and leaves text that looks like a cell alone", () => {
    const row = html`<tr>
      <th scope="row">1</th>
      <td>${'<td>not a cell</td>'}</td>
      <td class="num">3</td>
    </tr>`;
    expect(labelCells(row, ['id', 'a "b"', 'n']).value.replace(/>\s+</g, '><').trim()).toBe(
      '<tr><th data-label="id" scope="row">1</th><td data-label="a &quot;b&quot;">&lt;td&gt;not a cell&lt;/td&gt;</td><td data-label="n" class="num">3</td></tr>',
    );
  });

  it('leaves a row whose cells do not match the headings as it is', () => {
    const row = html`<tr>
      <td>1</td>
    </tr>`;
    expect(labelCells(row, ['a', 'b']).value).toBe(row.value);
  });
});
